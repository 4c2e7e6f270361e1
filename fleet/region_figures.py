"""What several regions' records say: per region, its users' outcomes (by home region) and its
GPUs' load (by the region that served); the spill share, the prefill that moved conversations
paid again, and what losing a region did. Pure: recorders in, numbers out.

Counts are of messages that arrived inside the measured window (after the warm-up, before the
last patience); rates and GPU-seconds are given at full scale (divided by the scale built).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from fleet.recorder import (
    PLACED_HOME,
    PLACED_MOVED,
    PLACED_SPILLED,
    TIERS,
    Outcome,
    Recorder,
)
from fleet.replicas import PoolSpec, prefill_gpu_s_per_token


@dataclass(frozen=True, slots=True)
class TierOutcome:
    messages: int
    answered_share: float
    timed_out_share: float
    refused_busy_share: float
    unreachable_share: float  # its region lost and not yet out, or a pinned user's home lost
    ttft_p95_s: float
    started_within_2s_share: float  # of the messages not refused at the door


@dataclass(frozen=True, slots=True)
class RegionFigures:
    name: str
    users_messages_per_s: float  # its users' messages, full scale
    openings: int  # its users' new conversations' first messages
    spilled: int  # of those, sent to another region (home full)
    spill_share: float
    away_share: float  # of its users' messages, the share run in another region
    taken_in_share: float  # of the messages it ran, the share from other regions' users
    tiers: dict[str, TierOutcome]  # its users'
    rung_mean: float  # its ladder over the window
    rung_max: int
    busy_share: dict[str, float]  # per pool, as the ladder reads it, mean over the window
    lost: int  # of the messages it ran, answers cut (its own loss) or lost


@dataclass(frozen=True, slots=True)
class LossFigures:
    region: str
    lost_at_s: float
    out_after_s: float  # from the loss to the others putting it out; nan if never
    answers_cut: int  # streaming on the lost region when it went
    unreachable: int  # messages nothing could take (full scale, over the run)
    lost_users_after_out: dict[str, TierOutcome]  # the lost region's users, once it is out
    others_before: dict[str, TierOutcome]  # the other regions' users, before the loss
    others_after: dict[str, TierOutcome]  # and after it was out


@dataclass(frozen=True, slots=True)
class RegionsSummary:
    scale: float
    window_s: tuple[float, float]
    regions: list[RegionFigures]
    spill_share: float  # of all new conversations' first messages
    away_share: float  # of all messages
    moved: int  # conversations under way that moved region (their first message there)
    # The history the moved conversations read again where they moved (their cache stayed
    # behind), in tokens and in GPU-seconds, full scale, over the window.
    moved_prefill_tokens: float
    moved_prefill_gpu_s: float
    loss: LossFigures | None


class _Rows:
    """Every region's records side by side, with the region that ran each message."""

    def __init__(self, recorders: list[Recorder], pools: dict[str, PoolSpec]) -> None:
        parts = [recorder.rows() for recorder in recorders]
        self.columns = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
        self.served = np.concatenate(
            [np.full(len(r.outcome), i, dtype=np.int64) for i, r in enumerate(recorders)]
        )
        self.home = np.concatenate([np.asarray(r.home, dtype=np.int64) for r in recorders])
        self.placed = np.concatenate([np.asarray(r.placed, dtype=np.int64) for r in recorders])
        cost = [
            np.array([prefill_gpu_s_per_token(pools[name].preset) for name in r.pools])
            for r in recorders
        ]
        self.gpu_s_per_token = np.concatenate(
            [cost[i][np.asarray(r.pool, dtype=np.int64)] for i, r in enumerate(recorders)]
        )

    def __getitem__(self, name: str) -> np.ndarray:
        column: np.ndarray = self.columns[name]
        return column

    def within(self, start_s: float, end_s: float) -> np.ndarray:
        arrival = self.columns["arrival_s"]
        inside: np.ndarray = (arrival >= start_s) & (arrival < end_s)
        return inside


def _share(mask: np.ndarray, of: np.ndarray) -> float:
    total = int(of.sum())
    return float((mask & of).sum()) / total if total else math.nan


def _tier_outcomes(rows: _Rows, chosen: np.ndarray) -> dict[str, TierOutcome]:
    outcome = rows["outcome"]
    ttft = rows["ttft_s"]
    started = ~np.isnan(ttft) & (ttft <= 2.0)
    figures = {}
    for i, tier in enumerate(TIERS):
        mine = chosen & (rows["tier"] == i)
        answered = mine & (outcome == Outcome.ANSWERED)
        not_refused = mine & (outcome != Outcome.REFUSED_BUSY) & (outcome != Outcome.UNREACHABLE)
        not_refused &= outcome != Outcome.REFUSED_BUDGET
        figures[tier.value] = TierOutcome(
            messages=int(mine.sum()),
            answered_share=_share(outcome == Outcome.ANSWERED, mine),
            timed_out_share=_share(outcome == Outcome.TIMED_OUT, mine),
            refused_busy_share=_share(outcome == Outcome.REFUSED_BUSY, mine),
            unreachable_share=_share(outcome == Outcome.UNREACHABLE, mine),
            ttft_p95_s=float(np.percentile(ttft[answered], 95)) if answered.any() else math.nan,
            started_within_2s_share=_share(started, not_refused),
        )
    return figures


def _openings(rows: _Rows, chosen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A new conversation's first message, run at home or spilled (one refused for its budget
    or as unreachable never reached a decision)."""
    outcome = rows["outcome"]
    decided = (outcome != Outcome.REFUSED_BUDGET) & (outcome != Outcome.UNREACHABLE)
    at_home = chosen & decided & (rows.placed == PLACED_HOME) & (rows["history"] == 0)
    spilled = chosen & (rows.placed == PLACED_SPILLED)
    return at_home, spilled


def _region(
    rows: _Rows,
    recorder: Recorder,
    index: int,
    name: str,
    window: np.ndarray,
    span: tuple[float, float],
    scale: float,
) -> RegionFigures:
    start_s, end_s = span
    users = window & (rows.home == index)
    ran = window & (rows.served == index)
    at_home, spilled = _openings(rows, users)
    lo, hi = int(start_s), max(int(start_s) + 1, int(end_s))
    rung = recorder.series["rung"][lo:hi]
    return RegionFigures(
        name=name,
        users_messages_per_s=float(users.sum()) / (end_s - start_s) / scale,
        openings=int(at_home.sum() + spilled.sum()),
        spilled=int(spilled.sum()),
        spill_share=_share(spilled, at_home | spilled),
        away_share=_share(rows.placed != PLACED_HOME, users),
        taken_in_share=_share(rows.home != index, ran),
        tiers=_tier_outcomes(rows, users),
        rung_mean=float(rung.mean()),
        rung_max=int(rung.max()),
        busy_share={
            pool: float(recorder.series[f"ladder_busy:{pool}"][lo:hi].mean())
            for pool in recorder.pools
        },
        lost=int((ran & (rows["outcome"] == Outcome.LOST)).sum()),
    )


def summarize_regions(
    recorders: list[Recorder],
    names: tuple[str, ...],
    scale: float,
    window_s: tuple[float, float],
    pools: dict[str, PoolSpec],
    lost_at_s: float = -1.0,
    lost: int = 0,
    out_at_s: float = -1.0,
) -> RegionsSummary:
    rows = _Rows(recorders, pools)
    start_s, end_s = window_s
    window = rows.within(start_s, end_s)
    regions = [
        _region(rows, recorder, i, names[i], window, window_s, scale)
        for i, recorder in enumerate(recorders)
    ]
    at_home, spilled = _openings(rows, window)
    moved = window & (rows.placed == PLACED_MOVED)
    outcome = rows["outcome"]
    moved_ran = moved & ((outcome == Outcome.ANSWERED) | (outcome == Outcome.TIMED_OUT))
    reread = np.maximum(rows["history"] - rows["cached"], 0) * moved_ran
    loss = None
    if lost_at_s >= 0:
        loss = _loss(rows, names[lost], lost, lost_at_s, out_at_s, start_s, end_s, scale)
    return RegionsSummary(
        scale=scale,
        window_s=window_s,
        regions=regions,
        spill_share=_share(spilled, at_home | spilled),
        away_share=_share(rows.placed != PLACED_HOME, window),
        moved=int(moved.sum()),
        moved_prefill_tokens=float(reread.sum()) / scale,
        moved_prefill_gpu_s=float((reread * rows.gpu_s_per_token).sum()) / scale,
        loss=loss,
    )


def _loss(
    rows: _Rows,
    name: str,
    lost: int,
    lost_at_s: float,
    out_at_s: float,
    start_s: float,
    end_s: float,
    scale: float,
) -> LossFigures:
    outcome = rows["outcome"]
    others = rows.home != lost
    after = out_at_s if out_at_s >= 0 else lost_at_s
    return LossFigures(
        region=name,
        lost_at_s=lost_at_s,
        out_after_s=out_at_s - lost_at_s if out_at_s >= 0 else math.nan,
        answers_cut=int(((rows.served == lost) & (outcome == Outcome.LOST)).sum()),
        unreachable=round(float((outcome == Outcome.UNREACHABLE).sum()) / scale),
        lost_users_after_out=_tier_outcomes(rows, rows.within(after, end_s) & (rows.home == lost)),
        others_before=_tier_outcomes(rows, rows.within(start_s, lost_at_s) & others),
        others_after=_tier_outcomes(rows, rows.within(after, end_s) & others),
    )


def fingerprints(recorders: list[Recorder]) -> list[str]:
    """Each region's Recorder.fingerprint with what a region alone does not record (its users'
    home regions and how each message got there): two runs with the same list recorded the
    same simulation of several regions."""
    digests = []
    for recorder in recorders:
        digest = hashlib.sha256(recorder.fingerprint().encode())
        digest.update(np.asarray(recorder.home, dtype=np.int64).tobytes())
        digest.update(np.asarray(recorder.placed, dtype=np.int64).tobytes())
        digests.append(digest.hexdigest())
    return digests
