"""The platform's picks by reason, read from the scheduler's /metrics: every counter whose name
speaks of picks and whose samples carry a `reason` label, summed over its other labels (pool,
say). Read generically, by label, so a reason the scheduler adds later shows in the race's
report without a change here; a scheduler that exports no such counter gives nothing, and the
report says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

REASON_LABEL = "reason"


def picks_by_reason(exposition: str) -> dict[str, float]:
    """reason -> picks so far, from one scrape's text."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(exposition):
        if family.type != "counter" or "pick" not in family.name:
            continue
        for sample in family.samples:
            reason = sample.labels.get(REASON_LABEL)
            if reason is None or not sample.name.endswith("_total"):
                continue  # a counter's _created series carries no count
            totals[reason] = totals.get(reason, 0.0) + sample.value
    return totals


def load_reports(exposition: str) -> float | None:
    """The load reports the scheduler has taken from its nodes so far; None without the
    counter (an older scheduler)."""
    for family in text_string_to_metric_families(exposition):
        if family.type == "counter" and family.name == "scheduler_load_reports":
            return sum(s.value for s in family.samples if s.name.endswith("_total"))
    return None


async def scrape_picks(
    http: aiohttp.ClientSession, metrics_url: str
) -> tuple[dict[str, float] | None, float | None]:
    """The scheduler's picks by reason now, and its load reports taken; None for what cannot
    be read or has no counter (the report tells the two apart from the scheduler's log)."""
    if not metrics_url:
        return None, None
    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
        async with http.get(metrics_url, timeout=aiohttp.ClientTimeout(total=5)) as response:
            text = await response.text()
            return picks_by_reason(text) or None, load_reports(text)
    return None, None


def picks_between(
    before: Mapping[str, float] | None, after: Mapping[str, float] | None
) -> dict[str, float] | None:
    """The picks a run made, by reason; a reason first seen in `after` counts from zero."""
    if after is None:
        return None
    before = before or {}
    return {reason: after[reason] - before.get(reason, 0.0) for reason in sorted(after)}


def describe(picks: Mapping[str, float] | None) -> str:
    if picks is None:
        return "the scheduler's /metrics has no picks counter by reason"
    total = sum(picks.values())
    if not total:
        return "no picks"
    escapes = {r: n for r, n in picks.items() if r != "affinity" and n}
    parts = ", ".join(f"{reason} {n:.0f}" for reason, n in picks.items() if n)
    escaped = sum(escapes.values())
    return f"{parts} (of {total:.0f} picks, {escaped / total:.0%} not by affinity)"
