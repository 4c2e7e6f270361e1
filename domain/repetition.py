"""Spots a runaway answer: one that has fallen into a loop, writing the same passage again and
again. Such an answer would run to its token cap, holding a GPU slot and charging the user for
text nobody reads; the gateway stops it at the first loop it sees.

The check: the answer's tail is the same passage (between `min_period` and `max_period`
characters long) repeated at least `repeats` times in a row, and the repeated stretch is at
least `min_span` characters (a short passage must repeat more often), so a short refrain
("ha ha ha") never trips it. It reads
only the last `repeats * max_period` characters, every `check_every` chunks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RepetitionPolicy:
    min_period: int = 8
    max_period: int = 400
    repeats: int = 4
    min_span: int = 160
    check_every: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.min_period <= self.max_period:
            raise ValueError("need 1 <= min_period <= max_period")
        if self.repeats < 2 or self.check_every < 1:
            raise ValueError("repeats must be at least 2 and check_every at least 1")


def loop_period(text: str, policy: RepetitionPolicy) -> int | None:
    """The length of the passage the text ends by repeating, or None when it does not."""
    # A text that ends by repeating a passage of length p has its last min_period characters
    # again p characters earlier; str.rfind finds those few candidates (in order of growing p)
    # without comparing every period from min_period to max_period.
    size = policy.min_period
    if len(text) < 2 * size:
        return None
    suffix = text[-size:]
    lowest_start = max(0, len(text) - size - policy.max_period)
    end = len(text) - size  # an occurrence must end at or before this: p >= min_period
    while (start := text.rfind(suffix, lowest_start, end)) >= 0:
        period = len(text) - size - start
        end = start + size - 1
        # A short passage must repeat more often to count: the looped stretch is at least
        # min_span long whatever the period.
        copies = max(policy.repeats, -(-policy.min_span // period))
        span = period * copies
        if span > len(text):
            continue
        tail = text[-span:]
        # A string is `repeats` copies of its last `period` characters exactly when shifting
        # it by one period leaves it unchanged.
        if tail[period:] == tail[:-period]:
            return period
    return None


class RepetitionGuard:
    """One per answer: feed it the answer's chunks; it says when the answer started looping."""

    def __init__(self, policy: RepetitionPolicy = RepetitionPolicy()) -> None:
        self._policy = policy
        self._keep = policy.max_period * policy.repeats
        self._tail = ""
        self._chunks = 0

    def feed(self, chunk: str) -> bool:
        """True once the answer is looping."""
        self._tail = (self._tail + chunk)[-self._keep :]
        self._chunks += 1
        if self._chunks % self._policy.check_every:
            return False
        return loop_period(self._tail, self._policy) is not None
