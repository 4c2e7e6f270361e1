from __future__ import annotations

import random
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


def every_period(text: str, policy: RepetitionPolicy) -> int | None:
    """The check written plainly: every period from the shortest to the longest."""
    for period in range(policy.min_period, policy.max_period + 1):
        span = period * max(policy.repeats, -(-policy.min_span // period))
        if span <= len(text) and text[-span:][period:] == text[-span:][:-period]:
            return period
    return None


@pytest.mark.parametrize("seed", range(6))
def test_the_period_found_is_the_shortest_one_any_period_would_give(seed: int) -> None:
    rng = random.Random(seed)
    policies = [RepetitionPolicy(), RepetitionPolicy(min_period=3, max_period=40, min_span=20)]
    for _ in range(300):
        # Few letters make near-loops and loops of loops; the tail may or may not be a loop.
        alphabet = "ab " if rng.random() < 0.5 else "abcdefgh .,"
        passage = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 60)))
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        text += passage * rng.randint(1, 12) + passage[: rng.randint(0, len(passage))]
        for policy in policies:
            assert loop_period(text, policy) == every_period(text, policy), (text, policy)


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
