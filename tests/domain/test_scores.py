"""A version's online scores: percentiles read from fixed histograms as Prometheus reads them,
histograms that add up across gateways, and a sender's extra buckets folded into the last."""

from __future__ import annotations

from domain.guardrails import Tally
from domain.scores import (
    RATE_BOUNDS,
    TTFT_BOUNDS_S,
    Percentile,
    fitted,
    one_in,
    quantile,
    scores_of,
    tokens_per_s,
)

BOUNDS = (1.0, 2.0, 4.0)


def test_one_value_lands_in_the_first_bucket_whose_bound_holds_it() -> None:
    assert one_in(0.3, BOUNDS) == (1, 0, 0, 0)
    assert one_in(2.0, BOUNDS) == (0, 1, 0, 0)
    assert one_in(9.0, BOUNDS) == (0, 0, 0, 1)
    assert one_in(None, BOUNDS) == ()


def test_a_percentile_is_interpolated_within_its_bucket() -> None:
    counts = (2, 2, 0, 0)  # two answers up to 1 s, two between 1 and 2 s
    assert quantile(counts, BOUNDS, 0.5) == Percentile(1.0)
    assert quantile(counts, BOUNDS, 0.75) == Percentile(1.5)
    assert quantile((0, 0, 0, 3), BOUNDS, 0.5) == Percentile(4.0, over=True)
    assert str(quantile((0, 0, 0, 3), BOUNDS, 0.5)) == ">4"
    assert quantile((), BOUNDS, 0.5) is None


def test_histograms_add_bucket_by_bucket_and_extra_buckets_fold_into_the_last() -> None:
    assert (Tally(ttft=(1, 2)) + Tally(ttft=(0, 1, 5))).ttft == (1, 3, 5)
    assert fitted((1, 1, 1, 1, 7, 2), BOUNDS) == (1, 1, 1, 10)
    assert fitted((1, 2), BOUNDS) == (1, 2)


def test_the_scores_of_a_tally() -> None:
    ttft = one_in(0.3, TTFT_BOUNDS_S)
    rates = one_in(tokens_per_s(30, 1.0), RATE_BOUNDS)
    tally = Tally(answers=4, errors=1, refusals=2, slow=0, thumbs_up=3, thumbs_down=1,
                  failovers=1, ttft=ttft, rates=rates)  # fmt: skip
    scores = scores_of(tally)
    assert (scores.answers, scores.error_share, scores.refusal_share, scores.failover_share,
            scores.thumbs_up, scores.thumbs_down) == (4, 0.25, 0.5, 0.25, 3, 1)  # fmt: skip
    # One answer in the (0.25, 0.5] s bucket: its median is halfway through it.
    assert str(scores.ttft_p50_s) == "0.375"
    assert str(scores.rate_p50) == "25"  # 30 tokens/s, in (20, 30]


def test_the_citation_share_is_of_the_cited_ids_not_of_the_answers() -> None:
    scores = scores_of(Tally(answers=10, citations=8, bad_citations=2))
    assert (scores.citations, scores.bad_citation_share) == (8, 0.25)
    assert (scores_of(Tally(answers=10)).citations, scores_of(Tally()).bad_citation_share) == (0, 0)


def test_a_rate_is_over_the_whole_answer_not_from_its_first_shown_text() -> None:
    # 12 tokens in an answer of 0.6 s, every one shown at its end (held back): 20 a second.
    assert tokens_per_s(12, 0.6) == 20.0
    assert (tokens_per_s(1, 0.5), tokens_per_s(0, 1.0), tokens_per_s(5, 0.0)) == (2.0, None, None)
