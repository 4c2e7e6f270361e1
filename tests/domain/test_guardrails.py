"""The canary's guardrails: a breach needs enough answers (and, for the hallucinated-citation
share, enough citations) and a share past its margin."""

from __future__ import annotations

from domain.guardrails import Guardrails, Tally, breaches

RAILS = Guardrails(error_margin=0.05, refusal_margin=0.05, slow_margin=0.05, min_answers=20)


def test_a_candidate_worse_beyond_the_margin_breaches_with_its_figures() -> None:
    candidate = Tally(answers=40, errors=12, refusals=1, slow=0)
    baseline = Tally(answers=400, errors=4, refusals=8, slow=0)
    assert breaches(candidate, baseline, RAILS) == ["error share 0.30 > 0.01 + 0.05 (40 answers)"]


def test_within_the_margin_or_too_few_answers_is_no_breach() -> None:
    assert breaches(Tally(40, 2, 0, 0), Tally(400, 4, 0, 0), RAILS) == []
    assert breaches(Tally(19, 19, 19, 19), Tally(400, 0, 0, 0), RAILS) == []


def test_every_guardrail_is_checked() -> None:
    found = breaches(Tally(20, 20, 20, 20), Tally(), RAILS)
    assert [f.split(" 1.00")[0] for f in found] == [
        "error share",
        "refusal share",
        "slow-start share",
    ]


def test_tallies_add_up() -> None:
    assert Tally(1, 1, 0, 0) + Tally(2, 0, 1, 1) == Tally(3, 1, 1, 1)


def test_tallies_add_up_their_citations() -> None:
    assert Tally(1, citations=3, bad_citations=1) + Tally(2, citations=4) == Tally(
        3, citations=7, bad_citations=1
    )


def cited(citations: int, bad: int, answers: int = 40) -> Tally:
    return Tally(answers, citations=citations, bad_citations=bad)


def test_a_hallucinated_citation_share_beyond_the_margin_breaches_with_its_figures() -> None:
    rails = Guardrails(citation_margin=0.02, min_citations=20)
    # 4 of 40 cited ids failed against 1 of 100: 0.10 > 0.01 + 0.02.
    assert breaches(cited(40, 4), cited(100, 1, answers=400), rails) == [
        "hallucinated citation share 0.10 > 0.01 + 0.02 (40 citations)"
    ]
    # A baseline that cites nothing has a share of 0.
    assert breaches(cited(40, 2), Tally(400), rails) == [
        "hallucinated citation share 0.05 > 0.00 + 0.02 (40 citations)"
    ]


def test_a_citation_share_within_the_margin_or_on_too_few_citations_is_no_breach() -> None:
    rails = Guardrails(citation_margin=0.02, min_citations=20)
    assert breaches(cited(100, 3), cited(100, 1), rails) == []  # 0.03 is not past 0.01 + 0.02
    # Every one of 19 citations failed: too few to judge on, however bad.
    assert breaches(cited(19, 19), cited(100, 0), rails) == []
    assert breaches(cited(20, 20), cited(100, 0), rails) != []
    # Nothing cited is a share of 0, never a breach.
    assert breaches(cited(0, 0), cited(100, 0), rails) == []


def test_the_citation_share_needs_the_answer_minimum_too() -> None:
    rails = Guardrails(min_answers=20, min_citations=20)
    assert breaches(cited(60, 60, answers=19), cited(100, 0), rails) == []


def test_citations_leave_the_other_guardrails_as_they_were() -> None:
    candidate = Tally(answers=40, errors=12, refusals=1, slow=0, citations=40, bad_citations=0)
    baseline = Tally(answers=400, errors=4, refusals=8, slow=0, citations=400, bad_citations=40)
    assert breaches(candidate, baseline, RAILS) == ["error share 0.30 > 0.01 + 0.05 (40 answers)"]
    found = breaches(Tally(20, 20, 20, 20, citations=20, bad_citations=20), Tally(), RAILS)
    assert [f.split(" 1.00")[0] for f in found] == [
        "error share",
        "refusal share",
        "slow-start share",
        "hallucinated citation share",
    ]
