"""Circuit breakers per model pool, and the fallback chain that routes around an open one.

A pool that keeps failing (no replica to pick, replicas lost mid-answer, first tokens that
never come) is not tried again for a cooling period: messages go straight to the next hop
instead of each spending its own timeout to learn the same thing (docs/decisions.md, "The
fallback chain stops at the small pool"). After the cooling period one trial message is let
through; its success closes the breaker, its failure opens it again.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from domain.pools import LARGE_POOL, SMALL_POOL


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    # This many failures within window_s open the breaker.
    failures_to_open: int = 5
    window_s: float = 30.0
    cooldown_s: float = 15.0
    # Failures from one replica this close together are one fault: every answer in flight
    # on a replica that dies fails over at once, and one dead replica of several is not a
    # failing pool.
    same_fault_s: float = 5.0


@dataclass(slots=True)
class CircuitBreaker:
    policy: BreakerPolicy
    clock: Callable[[], float]
    _failures: deque[float] = field(default_factory=deque)
    _opened_at: float | None = None
    # When the half-open trial went out. A trial that never reports (its message was refused
    # for another reason before it ran) stops blocking others after one more cooldown.
    _trial_at: float | None = None
    # When each replica last failed (see BreakerPolicy.same_fault_s).
    _last_by_source: dict[str, float] = field(default_factory=dict)

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return BreakerState.CLOSED
        if self.clock() - self._opened_at < self.policy.cooldown_s:
            return BreakerState.OPEN
        return BreakerState.HALF_OPEN

    def allows(self) -> bool:
        """Whether a message may try this pool now. In half-open, only one trial at a time."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        now = self.clock()
        if state is BreakerState.OPEN:
            return False
        if self._trial_at is not None and now - self._trial_at < self.policy.cooldown_s:
            return False
        self._trial_at = now
        return True

    def record_success(self) -> None:
        self._failures.clear()
        self._opened_at = None
        self._trial_at = None

    def record_failure(self, source: str = "") -> None:
        """source: the replica that failed, when one did; its failures within
        same_fault_s of its last count once."""
        now = self.clock()
        if source:
            last = self._last_by_source.get(source)
            self._last_by_source[source] = now
            if last is not None and now - last < self.policy.same_fault_s:
                return
            if len(self._last_by_source) > 4096:  # a bound: old replicas' times are kept no longer
                self._last_by_source = {source: now}
        if self._opened_at is not None:
            # A failed trial (or a late failure while open): cool down again from now.
            self._opened_at, self._trial_at = now, None
            return
        self._failures.append(now)
        while self._failures and now - self._failures[0] > self.policy.window_s:
            self._failures.popleft()
        if len(self._failures) >= self.policy.failures_to_open:
            self._opened_at = now
            self._failures.clear()


def fallback_chain(pool: str) -> tuple[str, ...]:
    """The pools a message tries in order; after the last, a composed "busy" answer. A large
    message falls to the small model rather than failing; a small one has nowhere to go."""
    if pool == LARGE_POOL:
        return (LARGE_POOL, SMALL_POOL)
    return (pool,)


class Breakers:
    """One breaker per pool, made on first use."""

    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float]) -> None:
        self._policy = policy
        self._clock = clock
        self._by_pool: dict[str, CircuitBreaker] = {}

    def of(self, pool: str) -> CircuitBreaker:
        breaker = self._by_pool.get(pool)
        if breaker is None:
            breaker = self._by_pool[pool] = CircuitBreaker(self._policy, self._clock)
        return breaker

    def states(self) -> dict[str, BreakerState]:
        return {pool: breaker.state for pool, breaker in self._by_pool.items()}
