from __future__ import annotations

import time

import pytest

from domain.repetition import RepetitionGuard, RepetitionPolicy, loop_period

PROSE = (
    "Rivers carve valleys over millions of years. The water carries sand and stones, which "
    "grind the bed deeper. Floods move the most material in a few days. Over time the valley "
    "widens as its walls slump and erode, and the river meanders across the flat floor, "
    "leaving oxbow lakes behind where old bends were cut off by new channels."
)


def feed_all(guard: RepetitionGuard, text: str, chunk: int = 4) -> int | None:
    """The index of the chunk at which the guard tripped, or None."""
    for index in range(0, len(text), chunk):
        if guard.feed(text[index : index + chunk]):
            return index
    return None


def test_ordinary_prose_never_trips() -> None:
    assert feed_all(RepetitionGuard(), PROSE * 1) is None
    assert loop_period(PROSE, RepetitionPolicy()) is None


def test_a_sentence_repeated_over_and_over_trips_soon_after_the_loop_sets_in() -> None:
    loop = "I am sorry, I cannot help with that. "
    text = PROSE + loop * 12
    tripped = feed_all(RepetitionGuard(), text)
    assert tripped is not None
    # It noticed within a couple of loops after the fourth copy appeared.
    assert tripped < len(PROSE) + len(loop) * 7


def test_a_short_refrain_is_not_a_runaway() -> None:
    assert loop_period("ha " * 10, RepetitionPolicy()) is None  # 30 characters in all
    assert loop_period("Yes! " * 6, RepetitionPolicy()) is None


def test_the_period_found_is_the_loop() -> None:
    loop = "The end. Or is it? "
    assert loop_period("intro " + loop * 9, RepetitionPolicy()) == len(loop)


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        RepetitionPolicy(min_period=0)
    with pytest.raises(ValueError):
        RepetitionPolicy(repeats=1)


def test_cheap_per_chunk() -> None:
    guard = RepetitionGuard()
    text = PROSE * 20
    start = time.process_time()
    for index in range(0, len(text), 4):
        guard.feed(text[index : index + 4])
    per_chunk = (time.process_time() - start) / (len(text) / 4)
    assert per_chunk < 200e-6  # generous: a few µs here
