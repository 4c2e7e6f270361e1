from __future__ import annotations

import pytest

from domain.errors import InvalidArgument
from domain.memory import MAX_TERMS, MEMORY_HEADER, MemoryPolicy, memory_block, search_terms
from domain.types import Tier


def test_search_terms_are_the_words_that_can_name_a_subject() -> None:
    assert search_terms("What's the best way to water my Tomatoes, please?") == [
        "best", "way", "water", "tomatoes"]  # fmt: skip
    # Letters and digits only, each once: nothing reaches a query language but words.
    assert search_terms('"OR" NEAR(x) * a_b -- 2024 2024 Café') == [
        "near", "2024", "café"]  # fmt: skip
    assert search_terms("is it the?") == []
    assert len(search_terms(" ".join(f"word{i}" for i in range(100)))) == MAX_TERMS


def test_the_block_lists_the_entries_on_one_line_each() -> None:
    assert memory_block([]) == ""
    assert memory_block(["I keep bees", "two\nlines  here"]) == (
        f"{MEMORY_HEADER}\n- I keep bees\n- two lines here")  # fmt: skip


def test_ageing_and_what_an_entry_may_hold() -> None:
    policy = MemoryPolicy(top_k={Tier.PLUS: 4}, max_age_s=100.0, max_chars=10)
    assert (policy.k(Tier.PLUS), policy.k(Tier.FREE)) == (4, 0)
    assert policy.aged(updated_at=899.0, pinned=False, now=1000.0)
    assert not policy.aged(updated_at=900.0, pinned=False, now=1000.0)
    assert not policy.aged(updated_at=0.0, pinned=True, now=1000.0)
    assert not MemoryPolicy(top_k={}, max_age_s=0).aged(0.0, False, 1e12)
    assert policy.checked_text("  ten chars  ") == "ten chars"
    for bad in ("", "   ", "eleven char"):
        with pytest.raises(InvalidArgument):
            policy.checked_text(bad)
