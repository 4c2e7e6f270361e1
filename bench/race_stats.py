"""How sure a race is of a difference: the rounds are its replicates (every system serves the
same scripts in a round, so two systems' figures of one round are a pair), and the spread of
their per-round ratios bounds the mean ratio. Two systems alike should read as alike: a run
with an A/A control (bench/race.py's platform-h0-twin) shows how wide the race's noise is."""

from __future__ import annotations

import math
import statistics

# Student's t at 95 % (one side), by degrees of freedom: a 90 % interval's half-width in
# standard errors. Past 20 the normal's 1.645 is within 5 %.
T_95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860,
        9: 1.833, 10: 1.812, 12: 1.782, 14: 1.761, 16: 1.746, 18: 1.734, 20: 1.725}  # fmt: skip


def round_interval(each: list[float]) -> tuple[float, float, float] | None:
    """The geometric mean of per-round ratios (as a change) with its 90 % interval, from the
    rounds' spread: each round is one pair of the two systems on the same scripts, so the
    rounds are the race's replicates. None with fewer than three rounds."""
    if len(each) < 3 or any(d <= -1 for d in each):
        return None
    logs = [math.log1p(d) for d in each]
    mean = statistics.fmean(logs)
    df = len(logs) - 1
    t = T_95[max(k for k in T_95 if k <= df)] if df <= 20 else 1.645
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.expm1(mean), math.expm1(mean - half), math.expm1(mean + half)
