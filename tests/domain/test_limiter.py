import math

from domain import limiter
from domain.types import Usage

FREE = limiter.Limit.refilling_in(25_000, 3 * 3600)


def test_cost_weights_cached_input_and_output() -> None:
    assert limiter.cost(390, 2610, 400) == 390 + 261 + 1600
    assert limiter.usage_cost(Usage(3000, 2610, 400)) == 390 + 261 + 1600


def test_a_bucket_that_affords_six_worst_cases_admits_exactly_six() -> None:
    worst = limiter.worst_case_cost(1000, 800)  # 4,200 units; 25,000 affords 5.95
    limit = limiter.Limit(capacity=6 * worst, refill_per_s=1.0)
    bucket = None
    admitted = 0
    for _ in range(30):
        decision = limiter.reserve(bucket, limit, now=100.0, amount=worst)
        bucket = decision.bucket
        admitted += decision.admitted
        if not decision.admitted:
            assert math.isclose(decision.retry_after_s, worst - bucket.level, rel_tol=1e-9)
    assert admitted == 6


def test_settle_gives_back_what_was_not_used_and_caps_at_capacity() -> None:
    decision = limiter.reserve(None, FREE, now=0.0, amount=10_000)
    assert decision.admitted and decision.bucket.level == 15_000
    settled = limiter.settle(decision.bucket, FREE, now=0.0, reserved=10_000, actual=1_000)
    assert settled.level == 24_000
    full = limiter.settle(settled, FREE, now=3 * 3600, reserved=10_000, actual=0)
    assert full.level == 25_000


def test_refill_is_linear_over_three_hours() -> None:
    empty = limiter.Bucket(0.0, 0.0)
    assert math.isclose(empty.refilled(FREE, 3600).level, 25_000 / 3, rel_tol=1e-9)


def test_a_request_larger_than_the_bucket_is_never_admitted() -> None:
    decision = limiter.reserve(None, FREE, now=0.0, amount=30_000)
    assert not decision.admitted and decision.retry_after_s == math.inf
