from __future__ import annotations

from domain.breaker import (
    BreakerPolicy,
    Breakers,
    BreakerState,
    CircuitBreaker,
    fallback_chain,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _breaker(clock: Clock) -> CircuitBreaker:
    return CircuitBreaker(BreakerPolicy(failures_to_open=3, window_s=10, cooldown_s=5), clock)


def test_opens_after_a_burst_of_failures_within_the_window() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(2):
        breaker.record_failure()
    assert breaker.allows() and breaker.state is BreakerState.CLOSED
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allows()


def test_failures_spread_beyond_the_window_do_not_open_it() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(5):
        breaker.record_failure()
        clock.now += 6  # two within any 10 s
    assert breaker.state is BreakerState.CLOSED


def test_a_success_forgets_earlier_failures() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED


def test_after_cooling_one_trial_goes_through_and_decides() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 5
    assert breaker.state is BreakerState.HALF_OPEN
    assert breaker.allows()  # the trial
    assert not breaker.allows()  # only one at a time
    breaker.record_failure()  # the trial failed: cool down again
    assert breaker.state is BreakerState.OPEN and not breaker.allows()
    clock.now += 5
    assert breaker.allows()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED and breaker.allows() and breaker.allows()


def test_the_chain_falls_from_large_to_small_and_small_has_nowhere_to_go() -> None:
    assert fallback_chain("large") == ("large", "small")
    assert fallback_chain("small") == ("small",)


def test_one_breaker_per_pool() -> None:
    clock = Clock()
    breakers = Breakers(BreakerPolicy(failures_to_open=1), clock)
    breakers.of("large").record_failure()
    assert not breakers.of("large").allows()
    assert breakers.of("small").allows()
    assert breakers.states() == {"large": BreakerState.OPEN, "small": BreakerState.CLOSED}


def test_a_trial_that_never_reports_does_not_block_the_pool_forever() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 5
    assert breaker.allows()  # the trial goes out and is never heard of again
    clock.now += 1
    assert not breaker.allows()
    clock.now += 5
    assert breaker.allows()  # another trial


def test_the_answers_one_dead_replica_had_in_flight_are_one_failure() -> None:
    """A replica dies with several answers on it: each fails over, and the pool, whose other
    replicas answer, must stay open to them."""
    clock = Clock()
    breaker = _breaker(clock)
    for _ in range(6):
        breaker.record_failure("node-a")
        clock.now += 0.2
    assert breaker.state is BreakerState.CLOSED
    # Other replicas failing too: the pool is failing.
    breaker.record_failure("node-b")
    breaker.record_failure("node-c")
    assert breaker.state is BreakerState.OPEN


def test_one_replica_failing_again_later_counts_again() -> None:
    clock = Clock()
    breaker = _breaker(clock)
    breaker.record_failure("node-a")
    for _ in range(2):
        clock.now += 5.0  # same_fault_s apart: three faults within the 10 s window
        breaker.record_failure("node-a")
    assert breaker.state is BreakerState.OPEN
