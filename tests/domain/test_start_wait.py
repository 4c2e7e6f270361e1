"""domain.start_wait: the wait before a request starts, as rung 3 and PickReplica read it."""

from __future__ import annotations

import math
import random

import pytest

from domain.start_wait import StartWaitModel, gamma_quantile, start_wait_s

MODEL = StartWaitModel(prefill_tokens_per_s=10_000, answer_s=10.0, paid_share=0.4)


def _poisson_cdf_below(k: int, mean: float) -> float:
    """P(N < k) for N ~ Poisson(mean)."""
    term, total = math.exp(-mean), 0.0
    for i in range(k):
        total += term
        term *= mean / (i + 1)
    return total


def _exact_gamma_quantile(k: int, p: float) -> float:
    """The time by which k unit-rate events happened with probability p, by bisection."""
    low, high = 0.0, 10.0 * k + 10
    for _ in range(200):
        mid = (low + high) / 2
        if 1 - _poisson_cdf_below(k, mid) < p:
            low = mid
        else:
            high = mid
    return low


@pytest.mark.parametrize("k", [1, 2, 5, 20, 100])
@pytest.mark.parametrize("p", [0.5, 0.9, 0.99])
def test_the_quantile_is_close_to_the_exact_one(k: int, p: float) -> None:
    assert gamma_quantile(k, p) == pytest.approx(_exact_gamma_quantile(k, p), rel=0.03)


def test_room_in_the_batch_means_only_the_prompt_queue_counts() -> None:
    # 60 of 100 places taken: the 5 waiting arrived since the last step, they start on the next.
    assert start_wait_s(MODEL, 20_000, 60, 5, max_running_requests=100) == pytest.approx(2.0)
    # The engine's limit unknown and the KV cache not full: no sign of a full batch.
    assert start_wait_s(MODEL, 0, 60, 5) == 0.0


def test_a_full_batch_waits_for_places_and_free_waits_longer() -> None:
    # 100 running, 10 waiting: this request is the 11th past the limit. Places open 10 a second
    # (100 answers of 10 s); paid requests take 40 % of them.
    paid = start_wait_s(MODEL, 0, 100, 10, max_running_requests=100, paid=True)
    free = start_wait_s(MODEL, 0, 100, 10, max_running_requests=100)
    assert paid == pytest.approx(gamma_quantile(11, 0.9) / 10)
    assert free == pytest.approx(paid / 0.6)
    assert paid > 1.1  # the 11th opening, with 90 % confidence: past its mean of 1.1 s
    # A longer prompt queue than that wins: both waits run side by side.
    assert start_wait_s(MODEL, 50_000, 100, 10, max_running_requests=100, paid=True) == 5.0


def test_a_replicas_measured_answer_time_replaces_the_configured_one() -> None:
    # 100 answers that hold their places 2 s each open 50 places a second, not 10.
    measured = start_wait_s(MODEL, 0, 100, 10, max_running_requests=100, paid=True, answer_s=2.0)
    assert measured == pytest.approx(gamma_quantile(11, 0.9) / 50)
    # 0 is "not measured yet": the model's 10 s count.
    assert start_wait_s(
        MODEL, 0, 100, 10, max_running_requests=100, paid=True, answer_s=0.0
    ) == pytest.approx(gamma_quantile(11, 0.9) / 10)


def test_a_full_kv_cache_is_a_full_batch_when_the_limit_is_unknown() -> None:
    assert start_wait_s(MODEL, 0, 80, 3, kv_usage=0.97, paid=True) == pytest.approx(
        gamma_quantile(4, 0.9) / 8
    )
    assert start_wait_s(MODEL, 0, 80, 0, kv_usage=0.97) == 0.0  # nobody queued


def test_the_promise_holds_for_nine_in_ten_requests_let_in() -> None:
    """Simulated: a full batch of 100 answers of exponential length; a request that is told it
    starts within w starts within w about 90 % of the time."""
    rng = random.Random(7)
    model = StartWaitModel(prefill_tokens_per_s=1e9, answer_s=10.0)
    kept = 0
    trials = 4000
    for _ in range(trials):
        waiting = rng.randrange(0, 30)
        promised = start_wait_s(model, 0, 100, waiting, 100, paid=True)
        # Time until waiting + 1 of 100 running answers end (memoryless lengths).
        t, running = 0.0, 100
        for _ in range(waiting + 1):
            t += rng.expovariate(running / model.answer_s)
        kept += t <= promised
    assert 0.87 < kept / trials < 0.93


@pytest.mark.parametrize(
    "bad",
    [
        {"prefill_tokens_per_s": 0, "answer_s": 1},
        {"prefill_tokens_per_s": 1, "answer_s": -1},
        {"prefill_tokens_per_s": 1, "answer_s": 1, "paid_share": 1.0},
        {"prefill_tokens_per_s": 1, "answer_s": 1, "confidence": 1.0},
    ],
)
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        StartWaitModel(**bad)
