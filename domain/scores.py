"""A version's online scores, as `chatctl versions show` prints them: shares of its answers and
of the passage ids they cited, and percentiles of how fast they started and flowed, from the
gateways' tallies over the scheduler's trailing window.

The percentiles come from small fixed histograms carried in the tallies (a count per bucket),
because percentiles cannot be added across gateways and polls while bucket counts can. A
percentile is read as Prometheus' histogram_quantile reads one: linearly within its bucket;
one in the last, open bucket is that bucket's lower bound (said as "> bound")."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from domain.guardrails import Tally

# Time to first text, seconds: the gateway's own TTFT buckets, the 10 s slow mark among them.
TTFT_BOUNDS_S = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 15.0, 30.0, 60.0)
# An answer's output tokens a second of its whole time (tokens_per_s).
RATE_BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 100.0, 200.0, 500.0, 1000.0)


def tokens_per_s(output_tokens: int, answer_s: float) -> float | None:
    """An answer's output tokens over its whole time, from the question's arrival to the end:
    the rate its reader got it at. Not from the first text shown: a held-back answer's text is
    released as it is checked, the last of it (a short answer: all of it) at once at the end,
    so a rate after the first shown text measured the release (over 1,000 a second), not the
    answer. None for an answer with no tokens."""
    if output_tokens > 0 and answer_s > 0:
        return output_tokens / answer_s
    return None


def one_in(value: float | None, bounds: Sequence[float]) -> tuple[int, ...]:
    """A histogram of one value (bucket i holds values up to bounds[i], the last the rest);
    none for no value."""
    if value is None:
        return ()
    counts = [0] * (len(bounds) + 1)
    counts[bisect.bisect_left(bounds, value)] = 1
    return tuple(counts)


def fitted(counts: Sequence[int], bounds: Sequence[float]) -> tuple[int, ...]:
    """Counts as these bounds' histogram: a sender's extra buckets go into the last one (what
    it counted was over the last bound either way)."""
    size = len(bounds) + 1
    if len(counts) <= size:
        return tuple(counts)
    return (*counts[: size - 1], sum(counts[size - 1 :]))


@dataclass(frozen=True, slots=True)
class Percentile:
    value: float
    # In the open last bucket: the value is only known to be over `value`.
    over: bool = False

    def __str__(self) -> str:
        return f"{'>' if self.over else ''}{self.value:.3g}"


def quantile(counts: Sequence[int], bounds: Sequence[float], q: float) -> Percentile | None:
    """The q-quantile (0 < q < 1) of a histogram; None for an empty one."""
    total = sum(counts)
    if not total:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i == len(bounds):
                return Percentile(bounds[-1], over=True)
            low = bounds[i - 1] if i else 0.0
            return Percentile(low + (bounds[i] - low) * (rank - seen) / n)
        seen += n
    return Percentile(bounds[-1], over=True)


@dataclass(frozen=True, slots=True)
class Scores:
    """One version's figures for one tier."""

    answers: int
    error_share: float
    refusal_share: float
    slow_share: float
    failover_share: float
    thumbs_up: int
    thumbs_down: int
    ttft_p50_s: Percentile | None
    ttft_p95_s: Percentile | None
    ttft_p99_s: Percentile | None
    # Tokens a second: the median and the slow end (5 % of answers flowed slower).
    rate_p50: Percentile | None
    rate_p5: Percentile | None
    # Cited passage ids checked, and the share of them that failed (0 with none cited).
    citations: int
    bad_citation_share: float


def scores_of(tally: Tally) -> Scores:
    return Scores(
        answers=tally.answers,
        error_share=tally.share(tally.errors),
        refusal_share=tally.share(tally.refusals),
        slow_share=tally.share(tally.slow),
        failover_share=tally.share(tally.failovers),
        thumbs_up=tally.thumbs_up,
        thumbs_down=tally.thumbs_down,
        ttft_p50_s=quantile(tally.ttft, TTFT_BOUNDS_S, 0.50),
        ttft_p95_s=quantile(tally.ttft, TTFT_BOUNDS_S, 0.95),
        ttft_p99_s=quantile(tally.ttft, TTFT_BOUNDS_S, 0.99),
        rate_p50=quantile(tally.rates, RATE_BOUNDS, 0.50),
        rate_p5=quantile(tally.rates, RATE_BOUNDS, 0.05),
        citations=tally.citations,
        bad_citation_share=tally.bad_citation_share,
    )
