"""Several simulated regions on small fleets: a full home spills new conversations to a region
with room and their later messages stay there, pinned users never leave home, a lost region
is out once it stops publishing and its users are answered elsewhere; one region run by the
regions' loop is the very simulation it runs alone."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from domain.replica_hardware import H100_8B, H100x4_70B
from fleet.directory import Directory, DirectoryPolicy, Published
from fleet.recorder import PLACED_AWAY, PLACED_HOME, PLACED_MOVED, PLACED_SPILLED, Outcome
from fleet.region import FleetConfig, FleetSim
from fleet.region_figures import summarize_regions
from fleet.regions import RegionsConfig, RegionSpec, RegionsSim, SpillPolicy
from fleet.replicas import PoolSpec
from fleet.workload import Workload, WorkloadSpec

LARGE = PoolSpec("large", H100x4_70B, 4)
SMALL = PoolSpec("small", H100_8B, 6)
POOLS = {p.name: p for p in (LARGE, SMALL)}
NAMES = ("full", "roomy", "quiet")


def config(rates: tuple[float, ...], spill: SpillPolicy, **kwargs: object) -> RegionsConfig:
    regions = tuple(
        RegionSpec(name, FleetConfig((LARGE, SMALL)), WorkloadSpec(peak_messages_per_s=rate))
        for name, rate in zip(NAMES, rates, strict=True)
    )
    return RegionsConfig(regions, spill, **kwargs)  # type: ignore[arg-type]


def placed(sim: RegionsSim, region: int) -> np.ndarray:
    return np.bincount(np.asarray(sim.regions[region].recorder.placed, dtype=int), minlength=4)


# The first region gets twice what fits (its ladder climbs), the others a third of it.
OVERLOADED = (90.0, 25.0, 25.0)


def test_a_full_home_spills_new_conversations_and_their_later_messages_stay() -> None:
    sim = RegionsSim(config(OVERLOADED, SpillPolicy(pinned_share=0.0)), 1, 1.0, 70.0)
    sim.run()
    full = placed(sim, 0)
    assert full[PLACED_SPILLED] == full[PLACED_AWAY] == full[PLACED_MOVED] == 0
    spilled = sum(placed(sim, r)[PLACED_SPILLED] for r in (1, 2))
    later = sum(placed(sim, r)[PLACED_AWAY] for r in (1, 2))
    # Users think about a minute between messages: the later ones come late in the run.
    assert spilled > 50 and later > 20
    # A conversation under way never moved: its cache is where it runs.
    assert all(placed(sim, r)[PLACED_MOVED] == 0 for r in range(3))
    # Only the full region's users run away, and nothing spills to it or between the others.
    for region in (1, 2):
        home = np.asarray(sim.regions[region].recorder.home)
        away = np.asarray(sim.regions[region].recorder.placed) != PLACED_HOME
        assert set(home[away]) == {0}
    rung = sim.regions[0].recorder.series["rung"]
    assert rung.max() >= 1  # it spilled because its ladder said it was full


def test_with_move_when_full_conversations_under_way_leave_and_read_their_history_again() -> None:
    spill = SpillPolicy(pinned_share=0.0, move_when_full=True)
    sim = RegionsSim(config(OVERLOADED, spill), 1, 1.0, 50.0)
    recorders = sim.run()
    moved = sum(placed(sim, r)[PLACED_MOVED] for r in (1, 2))
    # Nearly all go where there is room. The full region's ladder steps down between its
    # bursts and publishes room for that moment; the others, busy with what it sent them,
    # reach their own top rung now and then and may move a few there then.
    assert moved > 20 and placed(sim, 0)[PLACED_MOVED] * 20 < moved
    summary = summarize_regions(recorders, NAMES, 1.0, (0.0, 40.0), POOLS)
    assert 0 < summary.moved <= moved  # those that arrived past 40 s are not counted
    # Each read its history (about 3,000 tokens) where it moved, the system prompt aside.
    assert summary.moved_prefill_tokens > 1_000 * summary.moved > 0
    assert summary.moved_prefill_gpu_s > 0


def test_pinned_users_never_leave_home() -> None:
    sim = RegionsSim(config(OVERLOADED, SpillPolicy(pinned_share=1.0)), 1, 1.0, 70.0)
    sim.run()
    for region in range(3):
        assert list(placed(sim, region)) == [len(sim.regions[region].recorder.placed), 0, 0, 0]
    # Home gives them what its ladder gives: Free is shed there, nothing is lost.
    outcome = np.asarray(sim.regions[0].recorder.outcome)
    assert (outcome == Outcome.LOST).sum() == 0


def test_a_share_of_users_is_pinned() -> None:
    sim = RegionsSim(config(OVERLOADED, SpillPolicy(pinned_share=0.3)), 1, 1.0, 1.0)
    users = [f"r0u{i}" for i in range(10_000)]
    pinned = sum(sim.spill.pinned(user) for user in users)
    assert 2_800 < pinned < 3_200
    assert sim.spill.pinned("r0u17") == sim.spill.pinned("r0u17")


def test_a_lost_region_is_out_within_10_s_and_its_users_are_answered_elsewhere() -> None:
    rates = (30.0, 25.0, 25.0)  # the survivors have room for the lost one's users
    spill = SpillPolicy(pinned_share=0.2)
    sim = RegionsSim(config(rates, spill, lose=0, lose_at_s=30.0), 1, 1.0, 80.0)
    recorders = sim.run()
    out_after = sim.spill.out_at_s[0] - sim.lost_at_s
    assert sim.lost_at_s == 30.0 and 6.0 <= out_after <= 10.0
    summary = summarize_regions(recorders, NAMES, 1.0, (20.0, 70.0), POOLS, 30.0, 0, 30 + out_after)
    loss = summary.loss
    assert loss is not None and loss.answers_cut > 0
    # Once it is out, its users' messages run in the other regions, but for the pinned ones.
    for tier in ("free", "plus"):
        lost_users = loss.lost_users_after_out[tier]
        assert lost_users.answered_share > 0.7
        assert 0.1 < lost_users.unreachable_share < 0.3
        assert loss.others_after[tier].unreachable_share == 0.0
        assert loss.others_after[tier].answered_share > 0.95
    # Conversations under way there read their history again where they moved.
    assert summary.moved > 0 and summary.moved_prefill_tokens > 1_000 * summary.moved
    survivors = [np.asarray(r.home) for r in recorders[1:]]
    assert any((home == 0).any() for home in survivors)


def test_one_region_run_by_the_regions_loop_is_the_same_simulation_as_alone() -> None:
    spec = RegionSpec("only", FleetConfig((LARGE, SMALL)), WorkloadSpec(peak_messages_per_s=40))
    together = RegionsSim(RegionsConfig((spec,)), 3, 1.0, 40.0).run()[0]
    alone = FleetSim(spec.config, Workload(spec.workload, 3 * 1000, 1.0, "r0u"), 40.0).run()
    assert together.fingerprint() == alone.fingerprint()
    assert len(together.outcome) > 1_000


def published(region: int, taken_s: float, delay_s: float = 1.0) -> Published:
    return Published(region, taken_s, taken_s + delay_s, 0, {"large": 0.5}, {"large": True})


def test_the_directory_shows_a_publication_after_its_delay_and_puts_a_silent_region_out() -> None:
    directory = Directory(2, DirectoryPolicy(publish_interval_s=3.0, out_after_s=9.0))
    first, second = published(0, 0.0), published(0, 3.0)
    directory.publish(first)
    directory.publish(second)
    assert directory.latest(0, 0.5) is None and directory.is_out(0, 0.5)
    assert directory.latest(0, 3.5) is first  # the second is still on its way
    assert directory.latest(0, 4.0) is second
    assert not directory.is_out(0, 12.0) and directory.is_out(0, 12.5)
    assert directory.latest(1, 100.0) is None and directory.is_out(1, 100.0)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (lambda: DirectoryPolicy(publish_interval_s=10.0, out_after_s=9.0), "more often"),
        (lambda: DirectoryPolicy(publish_delay_s=9.0), "arrive before"),
        (lambda: SpillPolicy(pinned_share=1.5), "share"),
        (lambda: SpillPolicy(full_rung=0), "rung"),
    ],
)
def test_policies_refuse_settings_that_make_no_sense(policy: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy()  # type: ignore[operator]


def test_regions_must_report_on_one_tick() -> None:
    spec = RegionSpec("a", FleetConfig((LARGE,)), WorkloadSpec(peak_messages_per_s=5))
    other = dataclasses.replace(spec, config=FleetConfig((LARGE,), report_interval_s=0.5))
    with pytest.raises(ValueError, match="one tick"):
        RegionsSim(RegionsConfig((spec, other)), 1, 1.0, 10.0)
