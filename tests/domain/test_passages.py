"""Documents cut into passages (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.passages import passages


def test_short_paragraphs_share_a_passage_and_a_long_one_is_cut_at_sentences() -> None:
    text = "Cats sleep.\n\nDogs bark.\n\n" + "One sentence here. Another one there. A third."
    assert passages(text, 40) == [
        "Cats sleep.\n\nDogs bark.",
        "One sentence here. Another one there.",
        "A third.",
    ]


def test_a_sentence_longer_than_a_passage_is_cut_at_blanks_and_blank_parts_dropped() -> None:
    assert passages("\n\n  \n\nalpha beta gamma delta\n\n", 11) == ["alpha beta", "gamma delta"]
    assert passages("abcdefghij", 4) == ["abcd", "efgh", "ij"]
    assert passages("", 10) == []


def test_a_passage_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        passages("text", 0)


@given(st.text(alphabet=st.sampled_from("ab .\n"), max_size=300), st.integers(1, 50))
def test_every_passage_fits_and_no_word_is_lost(text: str, most: int) -> None:
    found = passages(text, most)
    assert all(0 < len(p) <= most for p in found)
    assert "".join(text.split()) == "".join("".join(found).split())
