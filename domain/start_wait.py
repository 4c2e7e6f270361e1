"""How long a new request may wait on a replica before it starts: what rung 3 of the ladder
compares with its 2 s, and what PickReplica tells a gateway. Pure: no I/O.

A request waits for two things. Its prompt must be read, behind the prompts already queued
(`queued_prefill_tokens` over the replica's prefill speed). And it needs a place in the batch:
when the batch is full (as many answers as the engine runs at once, or the KV cache full) it
starts once as many places have opened as there are requests past the limit, itself included.
With `running` answers of about `answer_s` each, places open about `running / answer_s` times a
second, like a Poisson process (a hundred answers of unrelated lengths end at unrelated times);
a free request sees only the places that paid requests, queued first, leave to it. The two
waits go on side by side: the longer counts.

The figure is not the mean wait but the wait not exceeded with `confidence` (9 times in 10 by
default): "cannot start within 2 s" is a promise to the users who are let in, and a mean of
1.8 s breaks it for four in ten of them. The time to the k-th opening is Gamma(k, rate); its
quantile uses the Wilson-Hilferty approximation (within 3 % from k = 1).

A waiting count alone does not mean a full batch (a request that arrived since the engine's
last step waits too, until that step admits it), so with the engine's batch limit known only
the requests past it wait for places; without it, only a full KV cache says so. Requests sent
since the replica's last report are added to its waiting count by the caller: the report does
not know them yet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Final

FULL_KV_USAGE: Final = 0.95  # past this the engine admits nothing new: the batch is full by memory


@dataclass(frozen=True, slots=True)
class StartWaitModel:
    prefill_tokens_per_s: float  # how fast one replica reads prompts
    answer_s: float  # how long a typical answer holds its place in the batch
    # The share of places opening in a full batch that paid requests take: they queue first,
    # so a free request sees only the rest.
    paid_share: float = 0.0
    confidence: float = 0.9
    # The normal quantile of `confidence`: derived once, not on every pick.
    _z: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (self.prefill_tokens_per_s > 0 and self.answer_s > 0):
            raise ValueError("prefill_tokens_per_s and answer_s must be positive")
        if not 0.0 <= self.paid_share < 1.0:
            raise ValueError("paid_share must be in [0, 1)")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")
        object.__setattr__(self, "_z", NormalDist().inv_cdf(self.confidence))


def start_wait_s(
    model: StartWaitModel,
    queued_prefill_tokens: int,
    running_requests: int,
    waiting_requests: int,
    max_running_requests: int = 0,
    kv_usage: float = 0.0,
    *,
    paid: bool = False,
    prefill_tokens_per_s: float = 0.0,
    answer_s: float = 0.0,
    expected: bool = False,
) -> float:
    """Seconds within which a request sent now starts, with the model's confidence (with
    `expected`, the mean wait instead: what a choice between replicas compares);
    `max_running_requests` is 0 when the engine's batch limit is not known;
    `prefill_tokens_per_s` and `answer_s`, what the replica measured of its reading speed
    and of how long its answers hold their places, replace the model's when above 0 (a node
    reports 0 until it has measured them)."""
    rate = prefill_tokens_per_s if prefill_tokens_per_s > 0 else model.prefill_tokens_per_s
    reading = queued_prefill_tokens / rate
    behind = 0  # requests (this one included) that must wait for a place to open
    if max_running_requests > 0:
        behind = running_requests + waiting_requests + 1 - max_running_requests
    if kv_usage >= FULL_KV_USAGE and waiting_requests:
        behind = max(behind, waiting_requests + 1)
    if behind <= 0 or not running_requests:
        return reading
    openings_per_s = running_requests / (answer_s if answer_s > 0 else model.answer_s)
    if not paid:
        openings_per_s *= 1.0 - model.paid_share
    openings = float(behind) if expected else _wilson_hilferty(behind, model._z)
    return max(reading, openings / openings_per_s)


def gamma_quantile(shape: float, p: float) -> float:
    """The p-quantile of Gamma(shape, 1): the time to the shape-th event of a unit-rate Poisson
    process."""
    return _wilson_hilferty(shape, NormalDist().inv_cdf(p))


def _wilson_hilferty(shape: float, z: float) -> float:
    # (X / k)^(1/3) is close to normal, with mean 1 - 1/(9k) and variance 1/(9k).
    c = 1.0 / (9.0 * shape)
    return shape * max(0.0, 1.0 - c + z * math.sqrt(c)) ** 3
