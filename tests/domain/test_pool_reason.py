"""Why the pool that serves is not the one asked for: the last move that changed it, none when
it ends where asked."""

from __future__ import annotations

from domain.pool_reason import PoolReason, route_reason, served_reason
from domain.router import RouteDecision, RouteReason

ROUTER, TIER, ALLOWANCE = PoolReason.ROUTER, PoolReason.TIER, PoolReason.ALLOWANCE
LADDER, FALLBACK, NONE = PoolReason.LADDER, PoolReason.FALLBACK, PoolReason.NONE


def test_a_free_pick_the_router_did_not_honour_is_the_tiers_doing() -> None:
    routed = RouteDecision("small", "small", RouteReason.CLASSIFIER)
    assert route_reason("large", routed) == TIER
    assert served_reason("large", [("small", TIER), ("small", ALLOWANCE), ("small", NONE)]) == TIER


def test_auto_is_the_routers_choice_unless_a_later_move_changed_it() -> None:
    routed = RouteDecision("large", "large", RouteReason.CLASSIFIER)
    assert route_reason(None, routed) == ROUTER
    assert served_reason(None, [("large", ROUTER), ("large", ALLOWANCE), ("large", NONE)]) == ROUTER
    assert served_reason(None, [("large", ROUTER), ("large", ALLOWANCE), ("small", LADDER)]) == (
        LADDER
    )


def test_an_honoured_pick_has_no_reason() -> None:
    assert served_reason("large", [("large", TIER), ("large", ALLOWANCE), ("large", NONE)]) == NONE


def test_each_later_move_names_itself() -> None:
    assert served_reason("large", [("large", TIER), ("small", ALLOWANCE), ("small", NONE)]) == (
        ALLOWANCE
    )
    assert served_reason("large", [("large", TIER), ("large", ALLOWANCE), ("small", FALLBACK)]) == (
        FALLBACK
    )
    routed = RouteDecision("small", "large", RouteReason.SHED)
    assert route_reason("large", routed) == LADDER


def test_a_pool_moved_away_and_back_to_the_one_asked_has_no_reason() -> None:
    # Free asks small, the router sends it large, the ladder sheds it back to small.
    assert served_reason("small", [("large", TIER), ("large", ALLOWANCE), ("small", LADDER)]) == (
        NONE
    )
