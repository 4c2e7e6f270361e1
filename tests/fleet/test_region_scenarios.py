"""Sizing 000's step 6 at 1/20 of each region: five regions at ten times the users, and the
largest of them lost. One run serves both (a module fixture, to keep the test time down):
region-lost is five-regions (the same regions, users and spill policy) until its loss at 60 s,
so the 20 s measured before the loss are five regions' spill, and the rest the loss."""

from __future__ import annotations

import pytest

from fleet.region_figures import summarize_regions
from fleet.region_scenarios import (
    NAMES,
    REGION_LARGE,
    REGION_SCENARIOS,
    REGION_SMALL,
    REGIONS,
    RegionsResult,
    build_regions,
    run_regions_scenario,
)

SCALE = 0.05


@pytest.fixture(scope="module")
def lost() -> RegionsResult:
    return run_regions_scenario("region-lost", scale=SCALE, seed=1, duration_s=85.0)


def test_the_planner_sizes_five_regions_of_about_3000_gpus() -> None:
    assert REGIONS == 5 and len(NAMES) == 5
    gpus = REGION_LARGE * 4 + REGION_SMALL
    assert 2_800 <= gpus <= 3_000 and 5 * gpus == pytest.approx(15_000, rel=0.03)


def test_region_lost_is_five_regions_until_its_loss() -> None:
    five, lost = REGION_SCENARIOS["five-regions"], REGION_SCENARIOS["region-lost"]
    assert five.config.regions == lost.config.regions and five.config.spill == lost.config.spill
    assert five.warmup_s == lost.warmup_s and five.config.lose_at_s < 0
    assert lost.config.lose_at_s == 60.0
    _, sim, pools = build_regions("five-regions", SCALE, 1)
    assert [p.replicas for p in pools] == [round(REGION_LARGE * SCALE), round(REGION_SMALL * SCALE)]
    assert len(sim.regions) == 5


def test_five_regions_spill_the_full_ones_new_conversations_and_keep_plus_answered(
    lost: RegionsResult,
) -> None:
    assert lost.scale == pytest.approx(SCALE, rel=0.05)
    # Before the loss (from the warm-up to a patience before it): five regions.
    pools = {p.name: p for p in build_regions("region-lost", SCALE, 1)[2]}
    summary = summarize_regions(lost.recorders, NAMES, lost.scale, (40.0, 50.0), pools)
    full, *others = summary.regions
    # The region nearest to 30 % of the users is full: most of its new conversations run
    # elsewhere; the others keep all of theirs and take its conversations in.
    assert full.rung_max >= 1 and full.spill_share > 0.2
    assert all(r.spilled == 0 and r.rung_max == 0 and r.taken_in_share > 0 for r in others)
    assert 0.04 < summary.spill_share < full.spill_share
    # No conversation under way moved: spilled ones stay where they started.
    assert summary.moved == 0 and summary.moved_prefill_tokens == 0
    # The full region's answers still streaming at 60 s were cut by its loss (recorded as
    # lost, without their first token): its answered Plus started within 2 s at the 95th.
    assert full.tiers["plus"].ttft_p95_s < 2.0
    for region in others:
        assert region.tiers["plus"].started_within_2s_share > 0.95
        assert region.lost == 0
        assert region.tiers["plus"].answered_share == 1.0
        assert region.tiers["free"].answered_share > 0.9
    assert summary.loss is None


def test_losing_the_largest_region_moves_its_users_and_spares_the_others(
    lost: RegionsResult,
) -> None:
    loss = lost.summary.loss
    assert loss is not None and loss.region == "us-east"
    assert loss.lost_at_s == 60.0 and 6.0 <= loss.out_after_s <= 10.0
    assert loss.answers_cut > 0 and loss.unreachable > 0
    for tier in ("free", "plus"):
        # Its users are answered elsewhere once it is out, all but the 10 % pinned to it.
        moved_users = loss.lost_users_after_out[tier]
        assert moved_users.answered_share > 0.8
        assert 0.05 < moved_users.unreachable_share < 0.2
        # The other regions' users never meet it.
        assert loss.others_before[tier].unreachable_share == 0.0
        assert loss.others_after[tier].unreachable_share == 0.0
    assert loss.others_after["plus"].answered_share == 1.0
    assert loss.others_after["plus"].started_within_2s_share > 0.95
    # Its conversations under way read their whole history again where they moved.
    summary = lost.summary
    assert summary.moved > 100
    assert summary.moved_prefill_tokens / summary.moved * SCALE > 1_000
    assert summary.moved_prefill_gpu_s > 0
