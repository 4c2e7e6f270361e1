"""Token-bucket arithmetic, weighted by GPU cost. Pure: the caller supplies the clock and keeps
the state (in process for the local platform, in a Redis script in production)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

from domain.types import Usage

CACHED_INPUT_WEIGHT: Final = 0.1
OUTPUT_WEIGHT: Final = 4.0


def cost(uncached_input: int, cached_input: int, output: int) -> float:
    # An output token is a whole decode pass; a cached input token is almost free.
    return uncached_input + CACHED_INPUT_WEIGHT * cached_input + OUTPUT_WEIGHT * output


def usage_cost(usage: Usage) -> float:
    cached = min(usage.cached_tokens, usage.input_tokens)
    return cost(usage.input_tokens - cached, cached, usage.output_tokens)


def worst_case_cost(prompt_tokens: int, max_answer_tokens: int) -> float:
    # Before the call neither the cache hit nor the answer length is known.
    return cost(prompt_tokens, 0, max_answer_tokens)


@dataclass(frozen=True, slots=True)
class Limit:
    capacity: float
    refill_per_s: float

    @classmethod
    def refilling_in(cls, capacity: float, refill_s: float) -> Limit:
        return cls(capacity, capacity / refill_s)


# Bucket and Decision are NamedTuples, not frozen dataclasses: the fleet simulator makes
# several per message, millions a run, and a frozen dataclass costs twice as much to build.


class Bucket(NamedTuple):
    level: float
    at: float

    def refilled(self, limit: Limit, now: float) -> Bucket:
        elapsed = max(0.0, now - self.at)
        return Bucket(min(limit.capacity, self.level + elapsed * limit.refill_per_s), now)


class Decision(NamedTuple):
    bucket: Bucket
    admitted: bool
    retry_after_s: float = 0.0


def reserve(bucket: Bucket | None, limit: Limit, now: float, amount: float) -> Decision:
    current = (bucket or Bucket(limit.capacity, now)).refilled(limit, now)
    if amount > limit.capacity:
        return Decision(current, False, float("inf"))
    if current.level < amount:
        return Decision(current, False, (amount - current.level) / limit.refill_per_s)
    return Decision(Bucket(current.level - amount, now), True)


def settle(
    bucket: Bucket | None, limit: Limit, now: float, reserved: float, actual: float
) -> Bucket:
    """Gives back what the answer did not use (or takes the overrun)."""
    current = (bucket or Bucket(limit.capacity, now)).refilled(limit, now)
    return Bucket(min(limit.capacity, current.level + reserved - actual), now)
