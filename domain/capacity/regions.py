"""Regions: how many the routed fleet needs when one region can get only so many GPUs, and
whether the rest carry the load of one that is lost (sizing 000's step 6: about 3,000 GPUs a
region, five regions at ten times the users).

Each region holds an equal share of the fleet. Its spare share (MessageInputs.spare_share) is
what absorbs a lost region's users: with n regions the other n - 1 carry everything, so their
busy share rises by n / (n - 1). Pure, like the rest of domain/capacity/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from domain.capacity.inputs import MessageInputs


@dataclass(frozen=True, slots=True)
class RegionPlan:
    regions: float  # the routed fleet over one region's GPUs, rounded up
    gpus_per_region: float
    busy_share: float  # busy GPUs over the fleet at the peak
    # The survivors' busy share when one of `regions` (two at least) is lost at the peak:
    # above 1, losing a region sheds load (the ladder's rungs) until it returns.
    busy_share_one_lost: float
    # The fewest regions whose n - 1 survivors carry the peak: n >= 1 / (1 - busy share).
    regions_to_lose_one: float


def plan_regions(i: MessageInputs, fleet_gpus: float, busy_gpus: float) -> RegionPlan:
    """Regions for a fleet of `fleet_gpus` of which `busy_gpus` are busy at the peak."""
    # round() first, as whole_replicas does: float noise must not buy a region.
    for_fleet = max(1, math.ceil(round(fleet_gpus / i.region_gpu_cap, 6)))
    busy = busy_gpus / fleet_gpus
    to_lose_one = math.ceil(round(1 / (1 - busy), 6)) if busy < 1 else math.inf
    counted = max(2, for_fleet)
    return RegionPlan(
        regions=float(for_fleet),
        gpus_per_region=fleet_gpus / for_fleet,
        busy_share=busy,
        busy_share_one_lost=busy * counted / (counted - 1),
        regions_to_lose_one=float(to_lose_one),
    )
