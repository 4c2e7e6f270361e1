"""The canary's guardrails: a breach needs enough answers and a share past its margin."""

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
