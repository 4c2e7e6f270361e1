"""The citation resolver (pure): what a reader is shown of an answer's markers, whatever the
chunks the text streams in, and what is counted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.citations import (
    MAX_MARKER,
    CitationResolver,
    Finding,
    cite,
    hallucinated,
    ids_in,
)

ANSWER = (
    "Cats sleep [[cite:file-a#0]] most of the day [1]. Dogs [[cite:file-z#9]] bark "
    "(source: the web). See a[1] and [^2] or [[cite]]. A link [4](http://x) stays, and "
    "【3†notes】 goes; [[cite:file-b#2]] was read elsewhere."
)
SHOWN = (
    "Cats sleep [[cite:file-a#0]] most of the day. Dogs bark. See a[1] and or. A link "
    "[4](http://x) stays, and goes; was read elsewhere."
)


def resolve(
    text: str, chunk: int, retrieved=("file-a#0",), allowed=()
) -> tuple[str, CitationResolver]:
    resolver = CitationResolver(retrieved, allowed)
    shown = "".join(resolver.feed(text[i : i + chunk]) for i in range(0, len(text), chunk))
    return shown + resolver.finish(), resolver


@pytest.mark.parametrize("chunk", [1, 2, 5, 13, len(ANSWER)])
def test_markers_not_retrieved_this_turn_and_uncited_forms_are_removed(chunk: int) -> None:
    shown, resolver = resolve(ANSWER, chunk)
    assert shown == SHOWN
    assert resolver.report.cited_ids == ["file-a#0"]
    assert resolver.report.unretrieved_ids == ["file-z#9", "file-b#2"]
    report = resolver.classify({"file-b#2"})
    assert report.counts == {Finding.RESOLVED: 1, Finding.UNCITED_FORM: 5,
                             Finding.NOT_RETRIEVED: 1, Finding.UNRESOLVED: 1}  # fmt: skip
    assert hallucinated(report) == (3, 2)


@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=60))
def test_what_is_shown_does_not_depend_on_the_chunks(sizes: list[int]) -> None:
    resolver = CitationResolver({"file-a#0"})
    shown, at = [], 0
    for size in sizes:
        shown.append(resolver.feed(ANSWER[at : at + size]))
        at += size
    shown.append(resolver.feed(ANSWER[at:]))
    assert "".join(shown) + resolver.finish() == SHOWN


def test_a_surface_may_keep_the_forms_it_allows() -> None:
    shown, resolver = resolve("Sleep matters [^1] and [2].", 3, allowed=("footnote",))
    assert shown == "Sleep matters [^1] and."
    assert resolver.report.counts == {Finding.ALLOWED_FORM: 1, Finding.UNCITED_FORM: 1}


def test_an_unknown_form_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown citation forms"):
        CitationResolver((), ("footnotes",))


def test_plain_text_is_not_held_back() -> None:
    resolver = CitationResolver({"x"})
    assert resolver.feed("Plain words, no brackets.") == "Plain words, no brackets."
    # A blank may precede a marker (which takes it along), and a bracket may still close.
    assert resolver.feed(" Then (an aside") == " Then"
    assert resolver.feed(") ends.") == " (an aside) ends."


def test_an_opening_left_open_is_held_at_most_a_markers_length() -> None:
    resolver = CitationResolver({"x"})
    shown = resolver.feed("[" + "a" * (MAX_MARKER + 10))
    assert shown.startswith("[a") and len(shown) > 10
    assert shown + resolver.finish() == "[" + "a" * (MAX_MARKER + 10)


def test_a_citation_the_turn_retrieved_is_kept_whole_at_the_answers_end() -> None:
    shown, resolver = resolve("Yes " + cite("doc-1#0"), 4, retrieved=("doc-1#0",))
    assert shown == "Yes [[cite:doc-1#0]]"
    assert hallucinated(resolver.classify(set())) == (1, 0)


def test_the_final_pass_counts_a_form_a_removal_made() -> None:
    # The inner marker goes; what is left reads "[1]", which no chunk held whole.
    shown, resolver = resolve("See [[[cite:zz]]1] here.", 100)
    assert shown == "See [1] here."
    assert resolver.report.counts[Finding.MISSED] == 1


def test_ids_are_listed_in_order_of_first_appearance() -> None:
    assert ids_in(["a [[cite:b#1]] c [[cite:a#0]]", "[[cite:b#1]] [[cite: x]]"]) == ["b#1", "a#0"]
