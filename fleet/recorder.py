"""What a fleet simulation records, and the figures it reports. Pure: arrays in, numbers out.

Every message ends in one outcome and leaves one row (arrival, tier, outcome, time to first
token, tokens/s, prompt, cached history). Time series hold one value per simulated second:
prefill GPU-seconds and busy GPU-seconds per pool, arrivals, refusals, timeouts, the rung.
Figures count messages that arrived inside the measured window: after the warm-up (the caches
fill, the ladder climbs) and at least one patience before the end (each had its chance to
start or time out).
"""

from __future__ import annotations

import enum
import hashlib
import math
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from domain.types import Tier


class Outcome(enum.IntEnum):
    ANSWERED = 0
    TIMED_OUT = 1  # no first token within the user's patience
    REFUSED_BUSY = 2  # rung 3: refused at the door
    REFUSED_BUDGET = 3  # the user's token bucket could not afford it
    NO_REPLICA = 4
    LOST = 5  # never answered, never refused: the failure the platform must not have
    # Several regions only: its region was lost and the global layer had not yet put it out
    # (or the user is pinned to it), so nothing could take the message.
    UNREACHABLE = 6


# How a message reached the region that handled it (several regions, fleet/regions.py).
PLACED_HOME: Final = 0  # the user's home region, where the conversation runs
PLACED_AWAY: Final = 1  # a later message of a conversation running away from home
PLACED_SPILLED: Final = 2  # a new conversation's first message, sent away from a full home
# The first message of a conversation under way on the region it moved to (its region was
# lost, or full where moving out of a full one is on): it reads its whole history again.
PLACED_MOVED: Final = 3


TIERS = (Tier.FREE, Tier.PLUS)
_ROW_FIELDS = (
    "arrival_s",
    "tier",
    "pool",
    "outcome",
    "ttft_s",
    "tokens_per_s",
    "prompt",
    "history",
    "cached",
)


@dataclass(slots=True)
class Recorder:
    duration_s: float
    pools: tuple[str, ...]
    arrival_s: list[float] = field(default_factory=list)
    tier: list[int] = field(default_factory=list)  # index into TIERS
    pool: list[int] = field(default_factory=list)  # index into pools
    outcome: list[int] = field(default_factory=list)
    ttft_s: list[float] = field(default_factory=list)  # nan without a first token
    tokens_per_s: list[float] = field(default_factory=list)  # nan without a whole answer
    prompt: list[int] = field(default_factory=list)  # tokens, 0 when refused before a prompt
    # The prompt before the new message (system prompt and earlier turns), in tokens, for
    # messages after a conversation's first: what the prefix cache can hold.
    history: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)  # prompt tokens found in the prefix cache
    moves: list[tuple[float, float, int]] = field(default_factory=list)  # (killed, pause, tokens)
    # Several regions: each message's user's home region and how it got here (PLACED_*). Not
    # part of the fingerprint, so a region alone records what it recorded before.
    home: list[int] = field(default_factory=list)
    placed: list[int] = field(default_factory=list)
    series: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        seconds = math.ceil(self.duration_s) + 1
        names = ["arrivals", "refused", "timeouts", "rung"]
        kinds = ("prefill", "busy", "ladder_busy")
        names += [f"{kind}:{pool}" for pool in self.pools for kind in kinds]
        self.series = {name: np.zeros(seconds) for name in names}

    def add(self, name: str, t_s: float, amount: float) -> None:
        series = self.series[name]
        series[min(int(t_s), len(series) - 1)] += amount

    def put(self, name: str, t_s: float, value: float) -> None:
        series = self.series[name]
        series[min(int(t_s), len(series) - 1)] = value

    def message(
        self,
        arrival_s: float,
        tier: Tier,
        pool: str,
        outcome: Outcome,
        ttft_s: float = math.nan,
        tokens_per_s: float = math.nan,
        prompt: int = 0,
        history: int = 0,
        cached: int = 0,
        home: int = 0,
        placed: int = PLACED_HOME,
    ) -> None:
        self.arrival_s.append(arrival_s)
        self.home.append(home)
        self.placed.append(placed)
        self.tier.append(TIERS.index(tier))
        self.pool.append(self.pools.index(pool))
        self.prompt.append(prompt)
        self.outcome.append(outcome)
        self.ttft_s.append(ttft_s)
        self.tokens_per_s.append(tokens_per_s)
        self.history.append(history)
        self.cached.append(cached)

    def rows(self) -> dict[str, np.ndarray]:
        return {name: np.asarray(getattr(self, name)) for name in _ROW_FIELDS}

    def fingerprint(self) -> str:
        """A digest of every message's record, the moves and the series: two runs with the
        same fingerprint recorded the same simulation, to the last bit."""
        digest = hashlib.sha256()
        for name, values in self.rows().items():
            digest.update(name.encode() + np.ascontiguousarray(values).tobytes())
        digest.update(np.asarray(self.moves, dtype=np.float64).tobytes())
        for name in sorted(self.series):
            digest.update(name.encode() + self.series[name].tobytes())
        return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class TierFigures:
    messages: int
    answered_share: float
    timed_out_share: float
    refused_busy_share: float
    refused_budget_share: float
    ttft_p50_s: float
    ttft_p95_s: float
    ttft_p99_s: float
    started_within_2s_share: float  # of the messages not refused
    tokens_per_s_p50: float
    tokens_per_s_p5: float


@dataclass(frozen=True, slots=True)
class Summary:
    scale: float
    window_s: tuple[float, float]
    messages_per_s: float  # arrivals in the window, this scale
    tiers: dict[str, TierFigures]
    timed_out_share: float  # of all messages
    history_cached_share: float  # of earlier turns' tokens, found in the prefix cache
    # Per pool, over the window: the share of time its GPUs were stepping (with continuous
    # batching, any answer in flight keeps them stepping), and the busy share the ladder reads
    # (domain.ladder.busy_share: KV use, or 1 for a replica with requests waiting).
    gpu_busy_share: dict[str, float]
    ladder_busy_share: dict[str, float]
    prefill_gpu_s: dict[str, float]  # per pool, over the window
    prefill_gpus_mean: dict[str, float]  # GPUs busy with prefill, on average, this scale
    prefill_gpus_peak: dict[str, float]  # the highest 10-second average, this scale
    # GPUs the pool's prefill needs at the window's arrival rate: the uncached prompt tokens of
    # a message that ran (answered or timed out), on average, x GPU-seconds a token x
    # messages/s. Unlike the GPU-time spent, it is not capped by the pool's size, so it tells
    # what an overloaded pool lacks.
    prefill_gpus_needed: dict[str, float]
    lost: int
    moved: int  # answers moved off a dead replica
    move_pause_p50_s: float
    move_pause_max_s: float

    def full_scale(self, value: float) -> float:
        """A count of GPUs or messages/s at this scale, as the full region would see it."""
        return value / self.scale


def _share(mask: np.ndarray, of: np.ndarray) -> float:
    total = int(of.sum())
    return float((mask & of).sum()) / total if total else math.nan


def _percentile(values: np.ndarray, q: float) -> float:
    values = values[~np.isnan(values)]
    return float(np.percentile(values, q)) if values.size else math.nan


def _tier_figures(rows: dict[str, np.ndarray], chosen: np.ndarray) -> TierFigures:
    outcome = rows["outcome"]
    ttft = rows["ttft_s"][chosen]
    not_refused = chosen & (outcome != Outcome.REFUSED_BUSY) & (outcome != Outcome.REFUSED_BUDGET)
    started_in_time = (rows["ttft_s"] <= 2.0) & ~np.isnan(rows["ttft_s"])
    return TierFigures(
        messages=int(chosen.sum()),
        answered_share=_share(outcome == Outcome.ANSWERED, chosen),
        timed_out_share=_share(outcome == Outcome.TIMED_OUT, chosen),
        refused_busy_share=_share(outcome == Outcome.REFUSED_BUSY, chosen),
        refused_budget_share=_share(outcome == Outcome.REFUSED_BUDGET, chosen),
        ttft_p50_s=_percentile(ttft, 50),
        ttft_p95_s=_percentile(ttft, 95),
        ttft_p99_s=_percentile(ttft, 99),
        started_within_2s_share=_share(started_in_time, not_refused),
        tokens_per_s_p50=_percentile(rows["tokens_per_s"][chosen], 50),
        tokens_per_s_p5=_percentile(rows["tokens_per_s"][chosen], 5),
    )


def _peak_10s(series: np.ndarray) -> float:
    if series.size < 10:
        return float(series.mean()) if series.size else 0.0
    return float(np.convolve(series, np.ones(10) / 10, mode="valid").max())


def _prefill_needed(
    rows: dict[str, np.ndarray],
    window: np.ndarray,
    pool: int,
    gpu_s_per_token: float,
    seconds: float,
) -> float:
    mine = window & (rows["pool"] == pool)
    # Timed-out messages count too: leaving them out would favour the short prompts that did
    # get through an overloaded pool.
    ran = mine & ((rows["outcome"] == Outcome.ANSWERED) | (rows["outcome"] == Outcome.TIMED_OUT))
    if not ran.any():
        return math.nan
    uncached = float((rows["prompt"][ran] - rows["cached"][ran]).mean())
    return uncached * gpu_s_per_token * float(mine.sum()) / seconds


def summarize(
    recorder: Recorder,
    scale: float,
    start_s: float,
    end_s: float,
    pool_gpus: dict[str, int],
    gpu_s_per_token: dict[str, float],
) -> Summary:
    rows = recorder.rows()
    arrival = rows["arrival_s"]
    window = (arrival >= start_s) & (arrival < end_s)
    tiers = {
        tier.value: _tier_figures(rows, window & (rows["tier"] == i))
        for i, tier in enumerate(TIERS)
    }
    later_turns = window & (rows["history"] > 0)
    history = rows["history"][later_turns].sum()
    lo, hi = int(start_s), max(int(start_s) + 1, int(end_s))
    seconds = hi - lo
    prefill = {p: recorder.series[f"prefill:{p}"][lo:hi] for p in recorder.pools}
    busy = {p: recorder.series[f"busy:{p}"][lo:hi] for p in recorder.pools}
    pauses = np.array([pause for _, pause, _ in recorder.moves])
    return Summary(
        scale=scale,
        window_s=(start_s, end_s),
        messages_per_s=float(window.sum()) / (end_s - start_s),
        tiers=tiers,
        timed_out_share=_share(rows["outcome"] == Outcome.TIMED_OUT, window),
        history_cached_share=float(rows["cached"][later_turns].sum() / history)
        if history
        else math.nan,
        gpu_busy_share={p: float(busy[p].sum()) / (seconds * pool_gpus[p]) for p in busy},
        ladder_busy_share={
            p: float(recorder.series[f"ladder_busy:{p}"][lo:hi].mean()) for p in recorder.pools
        },
        prefill_gpu_s={p: float(prefill[p].sum()) for p in prefill},
        prefill_gpus_mean={p: float(prefill[p].mean()) for p in prefill},
        prefill_gpus_peak={p: _peak_10s(prefill[p]) for p in prefill},
        prefill_gpus_needed={
            p: _prefill_needed(rows, window, i, gpu_s_per_token[p], end_s - start_s)
            for i, p in enumerate(recorder.pools)
        },
        lost=int((rows["outcome"] == Outcome.LOST).sum()),
        moved=len(recorder.moves),
        move_pause_p50_s=_percentile(pauses, 50) if pauses.size else math.nan,
        move_pause_max_s=float(pauses.max()) if pauses.size else math.nan,
    )
