"""`chatctl versions show`'s rows: the cited passage ids and the share of them that failed sit
beside the answers' shares, and a version that cited nothing shows no share ("-"), not 0 %."""

from __future__ import annotations

from clients.chatctl.versions import SCORE_HEADERS, score_rows
from domain.guardrails import Tally
from domain.types import Tier


def test_the_rows_show_citations_and_their_failed_share() -> None:
    rows = score_rows({
        ("v2", Tier.FREE): Tally(answers=4, citations=8, bad_citations=2),
        ("base", Tier.FREE): Tally(answers=4),
    })  # fmt: skip
    shown = [dict(zip(SCORE_HEADERS, row, strict=True)) for row in rows]
    assert [(r["VERSION"], r["CITED"], r["BAD CITES"]) for r in shown] == [
        ("base", "0", "-"),
        ("v2", "8", "25%"),
    ]
