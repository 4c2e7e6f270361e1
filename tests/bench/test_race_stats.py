"""bench/race_stats.py: the interval of a race's mean per-round ratio."""

from __future__ import annotations

import math

import pytest

from bench.race_stats import round_interval


def test_rounds_that_agree_give_an_interval_clear_of_zero() -> None:
    mean, low, high = round_interval([-0.10, -0.08, -0.12, -0.05]) or (0, 0, 0)
    assert low < mean < high < 0
    # The geometric mean of the ratios 0.90, 0.92, 0.88, 0.95.
    assert mean == pytest.approx(math.prod((0.90, 0.92, 0.88, 0.95)) ** 0.25 - 1)


def test_rounds_that_disagree_give_an_interval_holding_zero() -> None:
    _, low, high = round_interval([0.3, -0.2, 0.1]) or (0, 0, 0)
    assert low < 0 < high


def test_more_rounds_of_the_same_spread_narrow_the_interval() -> None:
    spread = [-0.2, 0.0, -0.1, 0.1]
    _, low4, high4 = round_interval(spread) or (0, 0, 0)
    _, low12, high12 = round_interval(spread * 3) or (0, 0, 0)
    assert high12 - low12 < (high4 - low4) / 2


def test_two_rounds_give_no_interval() -> None:
    assert round_interval([0.1, 0.2]) is None
    assert round_interval([0.1, -1.0, 0.2]) is None  # a ratio of zero has no logarithm
