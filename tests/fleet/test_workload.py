"""The workload model: rates that follow the curve, lengths that match sizing 000's means, and a
starting population that keeps the message rate steady from the first second."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from domain.types import Tier
from fleet.workload import DailyCurve, Spike, TokenLengths, Workload, WorkloadSpec


def test_the_rate_follows_the_daily_curve_and_its_spikes() -> None:
    spec = WorkloadSpec(peak_messages_per_s=1_000, spikes=(Spike(60, 30, 2.0),))
    assert spec.rate(0) == pytest.approx(1_000)  # the simulation starts at the evening peak
    assert spec.rate(70) == pytest.approx(2 * spec.rate(59), rel=0.01)
    night = DailyCurve(start_hour=3.0)
    assert night.factor(0) < 0.2  # nights are quiet
    curve = DailyCurve()
    day_mean = statistics.fmean(curve.factor(h * 3600.0) for h in range(24))
    assert 1 / day_mean == pytest.approx(3.0, rel=0.15)  # peak about 3x the day's average


def test_token_lengths_keep_their_mean_within_their_bounds() -> None:
    lengths = TokenLengths(400, 0.6, 10, 3_000)
    draws = lengths.draw_many(np.random.default_rng(1), 20_000)
    assert statistics.fmean(draws) == pytest.approx(400, rel=0.03)
    assert min(draws) >= 10 and max(draws) <= 3_000


def test_the_same_seed_gives_the_same_conversations() -> None:
    def plans(seed: int) -> list:
        return Workload(WorkloadSpec(), seed, 0.001).new_conversations(0.0, 30.0)

    assert plans(5) == plans(5) and plans(5) != plans(6)


def test_new_conversations_and_their_turns_make_the_message_rate() -> None:
    workload = Workload(WorkloadSpec(peak_messages_per_s=3_500), seed=2, scale=0.05)
    started = workload.new_conversations(0.0, 200.0)
    turns = sum(plan.turns for _, plan in started)
    assert turns / 200.0 == pytest.approx(workload.rate(0.0), rel=0.08)
    shares = [plan.tier is Tier.PLUS for _, plan in started]
    assert statistics.fmean(shares) == pytest.approx(0.4, abs=0.03)
    assert statistics.fmean(plan.easy for _, plan in started) == pytest.approx(0.7, abs=0.03)


def test_the_starting_population_sends_at_the_rate_less_the_new_conversations() -> None:
    spec = WorkloadSpec(peak_messages_per_s=3_500)
    workload = Workload(spec, seed=3, scale=0.05)
    population = workload.starting_population()
    assert all(plan.earlier_turns and plan.turns >= 1 for _, plan in population)
    # Each sends one message per gap between messages; new conversations send the rest.
    gap = spec.nominal_stream_s + spec.think_mean_s
    expected = workload.rate(0.0) * (1 - 1 / spec.turns_mean)
    assert len(population) / gap == pytest.approx(expected, rel=0.01)
    # Prompts average about 3,000 tokens: system + earlier turns + a new message.
    held = [
        spec.system_prompt_tokens + sum(q + a for q, a in plan.earlier_turns)
        for _, plan in population
    ]
    assert 2_000 < statistics.fmean(held) < 6_000


def test_scores_fall_on_the_conversations_side_but_for_misjudged_openings() -> None:
    spec = WorkloadSpec()
    workload = Workload(spec, seed=7)
    draws = 40_000
    for easy, misjudged in ((True, spec.easy_misjudged), (False, spec.hard_misjudged)):
        openings = [workload.score(easy, opening=True) for _ in range(draws)]
        later = [workload.score(easy, opening=False) for _ in range(draws)]
        assert all(0.0 <= score < 1.0 for score in openings + later)
        wrong = [(score < spec.score_threshold) != easy for score in openings]
        assert statistics.fmean(wrong) == pytest.approx(misjudged, abs=0.005)
        assert all((score < spec.score_threshold) == easy for score in later)
        # Each side is covered evenly: the place on it is uniform.
        right = [score for score in later if score < 0.25 or score >= 0.75]
        assert 0.45 < len(right) / draws < 0.55
