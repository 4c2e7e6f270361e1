"""Sizing 000's step 6 on the simulator: five regions at ten times the users, and the loss of
one of them (fleet/regions.py runs them; fleet.region_figures reads their records).

The fleets come from the capacity planner (domain/capacity/, `chatctl plan --daily-users
100000000`): ten times the users need 14,686 GPUs routed, five regions under the cap of about
3,000 GPUs each, so each region gets a fifth: 452 replicas of 70B on 4 H100s and 1,131 of 8B
on one (2,939 GPUs). The traffic is ten times sizing 000's peak, about 34,700 messages/s, all
five regions at their evening peak at once (the planner's worst case).

Users are not spread evenly over the regions: each region's share of them is what goes to it
as the nearest. The first region has 30 % of all users, more than its fifth of the GPUs can
serve, so its ladder climbs and new conversations spill to the regions with room. A scale
below 1 shrinks every region's fleet and traffic alike.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from domain.capacity import MessageInputs, plan_messages
from domain.pools import LARGE_POOL, SMALL_POOL
from domain.replica_hardware import H100_8B, H100x4_70B
from fleet.recorder import Recorder
from fleet.region import FleetConfig
from fleet.region_figures import RegionsSummary, summarize_regions
from fleet.regions import RegionsConfig, RegionSpec, RegionsSim, SpillPolicy
from fleet.replicas import PoolSpec, Strategy
from fleet.workload import WorkloadSpec, easy_share_for

_INPUTS = MessageInputs(daily_users=10 * MessageInputs().daily_users)
_PLAN = plan_messages(_INPUTS)
REGIONS = round(_PLAN.regions.regions)
REGION_LARGE = round(_PLAN.fleet.fleet_routed_large / H100x4_70B.gpus / REGIONS)
REGION_SMALL = round(_PLAN.fleet.fleet_routed_small / H100_8B.gpus / REGIONS)
TOTAL_PEAK = _PLAN.traffic.messages_per_s_peak
NAMES = ("us-east", "europe", "us-west", "asia-south", "asia-east")
# Each region's share of the users, as the nearest region. The first has half again the
# traffic its fifth of the GPUs is sized for; the others have room to give.
USER_SHARES = (0.3, 0.2, 0.18, 0.17, 0.15)


@dataclass(frozen=True, slots=True)
class RegionsScenario:
    name: str
    title: str
    config: RegionsConfig  # at full scale
    warmup_s: float
    measure_s: float
    patience_s: float


@dataclass(frozen=True, slots=True)
class RegionsResult:
    scenario: RegionsScenario
    scale: float  # the fleet actually built over the full one
    seed: int
    recorders: list[Recorder]
    summary: RegionsSummary
    wall_s: float


def _region_pools(scale: float) -> tuple[PoolSpec, ...]:
    return (
        PoolSpec(LARGE_POOL, H100x4_70B, max(1, round(REGION_LARGE * scale))),
        PoolSpec(SMALL_POOL, H100_8B, max(1, round(REGION_SMALL * scale))),
    )


def _built_scale(pools: tuple[PoolSpec, ...]) -> float:
    full = REGION_LARGE * H100x4_70B.gpus + REGION_SMALL * H100_8B.gpus
    return sum(p.replicas * p.preset.gpus for p in pools) / full


def _regions(config: FleetConfig) -> tuple[RegionSpec, ...]:
    base = WorkloadSpec()
    easy = easy_share_for(_INPUTS.small_model_share, base)
    return tuple(
        RegionSpec(
            name,
            config,
            dataclasses.replace(base, peak_messages_per_s=TOTAL_PEAK * share, easy_share=easy),
        )
        for name, share in zip(NAMES, USER_SHARES, strict=True)
    )


_FLEET = FleetConfig(_region_pools(1.0), Strategy.AFFINITY)


def _five_regions() -> RegionsScenario:
    return RegionsScenario(
        "five-regions",
        "Five regions at ten times the users: new conversations spill from a full region",
        RegionsConfig(_regions(_FLEET)),
        40.0,
        80.0,
        WorkloadSpec().patience_s,
    )


def _five_regions_moving() -> RegionsScenario:
    # The other reading of "later messages stay until that region is full": a
    # conversation under way leaves a full region too, and reads its history again. They
    # leave at once, from the ladder's first tick (10 s), so that is where measuring starts.
    config = RegionsConfig(_regions(_FLEET), SpillPolicy(move_when_full=True))
    return RegionsScenario(
        "five-regions-moving",
        "Five regions, conversations under way leaving a full region too",
        config,
        10.0,
        110.0,
        WorkloadSpec().patience_s,
    )


def _region_lost() -> RegionsScenario:
    # The largest region is lost: the worst loss, its users the most to move.
    config = RegionsConfig(_regions(_FLEET), lose=0, lose_at_s=60.0)
    return RegionsScenario(
        "region-lost",
        "A whole region lost: its users' conversations start elsewhere",
        config,
        40.0,
        80.0,
        WorkloadSpec().patience_s,
    )


REGION_SCENARIOS = {s.name: s for s in (_five_regions(), _five_regions_moving(), _region_lost())}


def shortest_regions_duration_s(name: str) -> float:
    scenario = REGION_SCENARIOS[name]
    return max(scenario.warmup_s, scenario.config.lose_at_s) + scenario.patience_s


def build_regions(
    name: str, scale: float, seed: int, duration_s: float | None = None
) -> tuple[RegionsScenario, RegionsSim, tuple[PoolSpec, ...]]:
    """The scenario (its measure_s set by `duration_s`, the simulated time in all), its
    regions built at `scale` and ready to run, and each region's pools."""
    scenario = REGION_SCENARIOS[name]
    if duration_s is not None:
        shortest = shortest_regions_duration_s(name)
        if duration_s <= shortest:
            raise ValueError(
                f"{name} needs more than {shortest:g} simulated s: its warm-up (and loss), "
                "then the users' patience"
            )
        scenario = dataclasses.replace(scenario, measure_s=duration_s - scenario.warmup_s)
    pools = _region_pools(scale)
    specs = tuple(
        dataclasses.replace(spec, config=dataclasses.replace(spec.config, pools=pools))
        for spec in scenario.config.regions
    )
    config = dataclasses.replace(scenario.config, regions=specs)
    end = scenario.warmup_s + scenario.measure_s
    return scenario, RegionsSim(config, seed, _built_scale(pools), end), pools


def run_regions_scenario(
    name: str, scale: float = 0.05, seed: int = 1, duration_s: float | None = None
) -> RegionsResult:
    """Runs the named scenario; `duration_s` is the simulated time in all, warm-up included."""
    scenario, sim, pools = build_regions(name, scale, seed, duration_s)
    started = time.perf_counter()
    recorders = sim.run()
    wall = time.perf_counter() - started
    config = sim.config
    out_at = sim.spill.out_at_s.get(config.lose, -1.0) if sim.lost_at_s >= 0 else -1.0
    built = _built_scale(pools)
    end = scenario.warmup_s + scenario.measure_s
    summary = summarize_regions(
        recorders,
        NAMES,
        built,
        (scenario.warmup_s, end - scenario.patience_s),
        {p.name: p for p in pools},
        sim.lost_at_s,
        config.lose,
        out_at,
    )
    return RegionsResult(scenario, built, seed, recorders, summary, wall)
