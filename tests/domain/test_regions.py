"""Where a message runs: the region rules on views made up for each case."""

from __future__ import annotations

from domain.regions import (
    Placement,
    PoolCapacity,
    Reason,
    RegionCapacity,
    RegionRules,
    Regions,
)

NOW = 1_000.0
RULES = RegionRules(spill_rung=3, out_after_s=6.0)


def region(name: str, rung: int = 0, busy: float = 0.2, ready: int = 2, age: float = 1.0):
    return RegionCapacity(name, NOW - age, {"small": PoolCapacity(rung, busy, ready)}, ("gw",))


def view(*records: RegionCapacity) -> Regions:
    return Regions({r.name: r for r in records}, NOW, RULES)


def test_home_with_room_serves() -> None:
    assert view(region("a"), region("b")).place("a", False, "", "small") == Placement(
        "a", Reason.HOME
    )


def test_home_at_the_spill_rung_spills_to_the_region_with_most_room() -> None:
    regions = view(region("a", rung=3), region("b", rung=1), region("c", busy=0.5))
    assert regions.place("a", False, "", "small") == Placement("c", Reason.SPILL)


def test_equal_room_is_broken_by_busy_share_then_name() -> None:
    regions = view(region("a", rung=3), region("c", busy=0.3), region("b", busy=0.3))
    assert regions.place("a", False, "", "small").region == "b"
    regions = view(region("a", rung=3), region("c", busy=0.1), region("b", busy=0.3))
    assert regions.place("a", False, "", "small").region == "c"


def test_home_without_a_ready_replica_is_full() -> None:
    regions = view(region("a", ready=0), region("b"))
    assert regions.place("a", False, "", "small") == Placement("b", Reason.SPILL)


def test_home_full_and_nowhere_with_room_stays_home() -> None:
    regions = view(region("a", rung=3), region("b", rung=3), region("c", age=30.0))
    assert regions.place("a", False, "", "small") == Placement("a", Reason.HOME)


def test_a_pinned_user_stays_home_whatever_the_rung() -> None:
    regions = view(region("a", rung=3), region("b"))
    assert regions.place("a", True, "", "small") == Placement("a", Reason.HOME)
    assert regions.place("a", True, "b", "small") == Placement("a", Reason.HOME)


def test_a_later_turn_stays_on_its_region_until_it_is_full_or_gone() -> None:
    assert view(region("a"), region("b")).place("a", False, "b", "small") == Placement(
        "b", Reason.STAYS
    )
    assert view(region("a"), region("b", rung=3)).place("a", False, "b", "small") == Placement(
        "a", Reason.HOME
    )
    assert view(region("a"), region("b", age=7.0)).place("a", False, "b", "small") == Placement(
        "a", Reason.HOME
    )


def test_a_region_silent_past_the_limit_is_out() -> None:
    regions = view(region("a", age=6.5), region("b"))
    assert not regions.alive("a")
    assert regions.place("a", False, "", "small") == Placement("b", Reason.HOME_OUT)
    assert view(region("a", age=5.9)).alive("a")


def test_a_pool_a_region_does_not_publish_has_no_room_there() -> None:
    regions = view(region("a", rung=3), region("b"))
    assert regions.place("a", False, "", "large") == Placement("a", Reason.HOME)
