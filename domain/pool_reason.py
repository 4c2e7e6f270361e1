"""Why the pool that serves an answer is not the one the user asked for, told to the client in
the meta event and a response header, so that a choice the platform overrode is never silently
ignored.

A message's pool moves at most a few times before it runs, always in this order: the router
(a Free user's pick is not honoured, domain/router.py; "auto" is the router's choice), the
daily allowance (gateway/daily_budget.py), then the planner: the fallback chain past a pool
with no replica or an open breaker (domain/breaker.py) and the ladder's rung (domain/
shedding.py). The reason given is that of the last move that changed the pool; none when the
pool that serves is the one asked for, whatever moved it on the way.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from domain.router import RouteDecision, RouteReason


class PoolReason(StrEnum):
    """Short and stable: clients match on these."""

    NONE = ""
    # "auto": no pool was asked for, and the router chose.
    ROUTER = "router"
    # Picking a pool is Plus's: a Free user's pick was routed as "auto".
    TIER = "tier"
    # The user spent the day's allowance: the small pool serves.
    ALLOWANCE = "allowance"
    # The ladder sheds Free to the small pool while the fleet is busy.
    LADDER = "ladder"
    # The pool had no replica, or its breaker was open: the next of the fallback chain serves.
    FALLBACK = "fallback"


def route_reason(asked: str | None, route: RouteDecision) -> PoolReason:
    """Why the router's pool is not the one asked for (meaningful only where they differ)."""
    if asked is None:
        return PoolReason.ROUTER
    if route.reason is RouteReason.SHED:
        return PoolReason.LADDER
    # The router honours every Plus pick (and every pick when it is off): only a Free pick
    # ends elsewhere.
    return PoolReason.TIER


def served_reason(asked: str | None, moves: Iterable[tuple[str, PoolReason]]) -> PoolReason:
    """moves: each step's pool and why that step would have moved it, in order."""
    pool, reason = asked, PoolReason.NONE
    for moved_to, why in moves:
        if moved_to != pool:
            pool, reason = moved_to, why
    return PoolReason.NONE if pool == asked else reason
