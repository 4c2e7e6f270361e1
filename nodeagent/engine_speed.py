"""How fast this node's engine reads prompts and takes decode steps, measured from its own
requests (and how long its answers hold their place in the batch): what the scheduler prices
waits and moves with (docs/decisions.md, "Where a
conversation's cache is"), instead of a speed set by hand.

A window of the last requests, summed: tokens over seconds, so a few-token prompt (whose fixed
cost per request dominates) weighs by its tokens, not as one vote among equals. 0 until a
request has been measured."""

from __future__ import annotations

from collections import deque


class _Window:
    def __init__(self, size: int) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=size)
        self._count = 0.0
        self._seconds = 0.0

    def add(self, count: float, seconds: float) -> None:
        if count <= 0 or not seconds > 0:
            return  # nothing read (all cached), or a timing that says nothing
        if len(self._samples) == self._samples.maxlen:
            old_count, old_seconds = self._samples[0]
            self._count -= old_count
            self._seconds -= old_seconds
        self._samples.append((count, seconds))
        self._count += count
        self._seconds += seconds

    def per_second(self) -> float:
        return self._count / self._seconds if self._samples else 0.0

    def seconds_each(self) -> float:
        return self._seconds / self._count if self._samples else 0.0


class EngineSpeed:
    def __init__(self, window: int = 32) -> None:
        if window < 1:
            raise ValueError("window must be 1 or more")
        self._prompt = _Window(window)
        self._decode = _Window(window)
        self._answers = _Window(window)

    def prompt_read(self, uncached_tokens: int, seconds: float) -> None:
        """A request's prefill: the tokens it read (not those found cached) and how long."""
        self._prompt.add(uncached_tokens, seconds)

    def decoded(self, steps: int, seconds: float) -> None:
        """A request's decode: the steps after its first token and how long they took."""
        self._decode.add(steps, seconds)

    def answered(self, seconds: float) -> None:
        """A finished answer: how long it held its place in the batch, prompt and decode."""
        self._answers.add(1, seconds)

    @property
    def prefill_tokens_per_s(self) -> float:
        return self._prompt.per_second()

    @property
    def decode_step_s(self) -> float:
        return self._decode.seconds_each()

    @property
    def answer_s(self) -> float:
        """The mean time an answer held its place: how often places open in a full batch."""
        return self._answers.seconds_each()


# An engine's measured step can lag a change of load; past this many tokens an event's text
# would come in lumps a reader notices even if the measure were stale.
MOST_TOKENS_PER_EVENT = 16


def tokens_per_event(interval_s: float, decode_step_s: float) -> int:
    """How many tokens an engine may gather into one streamed event for a reader that takes new
    text every interval_s: as many decode steps as fit in it, at most MOST_TOKENS_PER_EVENT;
    1 (each token as it comes) while the step is unmeasured or the reader wants every token.
    Each event costs the engine's HTTP server a JSON object and the node a parse; text held
    within the interval reaches the user no later, since the node holds it that long anyway."""
    if interval_s <= 0 or decode_step_s <= 0:
        return 1
    return max(1, min(MOST_TOKENS_PER_EVENT, int(interval_s / decode_step_s)))
