"""Writes a regions scenario's results: summary.md (the figures and a table a region), and
regions.csv and tiers.csv (the same tables for a spreadsheet). fleet.report does the same for
one region; this one has no plots."""

from __future__ import annotations

import csv
import math
from dataclasses import asdict
from pathlib import Path

from fleet.region_figures import RegionsSummary, TierOutcome
from fleet.region_scenarios import RegionsResult

_REGION_COLUMNS = (
    "region",
    "users' messages/s (full)",
    "new conversations",
    "spilled",
    "spill share",
    "users' messages run away",
    "run here for other regions",
    "rung mean",
    "rung max",
    "large busy",
    "small busy",
    "lost",
)
_TIER_COLUMNS = (
    "users of",
    "when",
    "tier",
    "messages",
    "answered",
    "timed out",
    "refused busy",
    "unreachable",
    "TTFT p95 s",
    "started <= 2 s",
)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


def _num(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def region_rows(summary: RegionsSummary) -> list[list[str]]:
    return [
        [
            r.name,
            _num(r.users_messages_per_s, 0),
            f"{r.openings:,}",
            f"{r.spilled:,}",
            _pct(r.spill_share),
            _pct(r.away_share),
            _pct(r.taken_in_share),
            _num(r.rung_mean),
            str(r.rung_max),
            _pct(r.busy_share.get("large", math.nan)),
            _pct(r.busy_share.get("small", math.nan)),
            f"{r.lost:,}",
        ]
        for r in summary.regions
    ]


def _tier_row(users: str, when: str, tier: str, f: TierOutcome) -> list[str]:
    return [
        users,
        when,
        tier,
        f"{f.messages:,}",
        _pct(f.answered_share),
        _pct(f.timed_out_share),
        _pct(f.refused_busy_share),
        _pct(f.unreachable_share),
        _num(f.ttft_p95_s),
        _pct(f.started_within_2s_share),
    ]


def tier_rows(summary: RegionsSummary) -> list[list[str]]:
    rows = [
        _tier_row(r.name, "window", tier, f) for r in summary.regions for tier, f in r.tiers.items()
    ]
    loss = summary.loss
    if loss is not None:
        for when, users, tiers in (
            ("before the loss", "other regions", loss.others_before),
            ("after it is out", "other regions", loss.others_after),
            ("after it is out", loss.region, loss.lost_users_after_out),
        ):
            rows += [_tier_row(users, when, tier, f) for tier, f in tiers.items()]
    return rows


def _table(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def headline(result: RegionsResult) -> list[str]:
    s = result.summary
    window = s.window_s[1] - s.window_s[0]
    lines = [
        f"- New conversations spilled to another region: {_pct(s.spill_share)} of all; "
        f"messages run away from home: {_pct(s.away_share)}.",
        f"- Conversations under way that moved region: {s.moved:,} at this scale; the history "
        f"they read again: {s.moved_prefill_tokens:,.0f} tokens, "
        f"{s.moved_prefill_gpu_s:,.0f} GPU-s at full scale over the {window:g} s measured "
        f"({s.moved_prefill_gpu_s / window:,.1f} GPUs on average). A spilled new conversation "
        "reads no history: its first prompt is the system prompt (cached in every region) and "
        "its message.",
    ]
    loss = s.loss
    if loss is not None:
        after, before = loss.others_after, loss.others_before
        lost = loss.lost_users_after_out
        lines += [
            f"- {loss.region} lost at {loss.lost_at_s:g} s: out after {loss.out_after_s:.1f} s; "
            f"{loss.answers_cut:,} answers streaming there cut (this scale); "
            f"{loss.unreachable:,} messages nothing could take (full scale).",
            f"- Its users once it is out: Plus answered {_pct(lost['plus'].answered_share)}, "
            f"Free {_pct(lost['free'].answered_share)} (pinned users unreachable: "
            f"{_pct(lost['plus'].unreachable_share)} of Plus).",
            f"- Other regions' users, before -> after: Plus answered "
            f"{_pct(before['plus'].answered_share)} -> {_pct(after['plus'].answered_share)}, "
            f"TTFT p95 {_num(before['plus'].ttft_p95_s)} -> {_num(after['plus'].ttft_p95_s)} s; "
            f"Free answered {_pct(before['free'].answered_share)} -> "
            f"{_pct(after['free'].answered_share)}, refused busy "
            f"{_pct(before['free'].refused_busy_share)} -> "
            f"{_pct(after['free'].refused_busy_share)}.",
        ]
    return lines


def summary_text(result: RegionsResult) -> str:
    s = result.summary
    scenario = result.scenario
    lines = [
        f"# {scenario.title}",
        "",
        f"Scenario `{scenario.name}`, scale {result.scale:.4f} of each region (messages/s and "
        f"GPU-seconds shown at full scale), seed {result.seed}, measured from "
        f"{s.window_s[0]:g} s to {s.window_s[1]:g} s of simulated time. Real time: "
        f"{result.wall_s:.0f} s.",
        "",
        *headline(result),
        "",
        "## Regions (users by home region; load by the region that ran them)",
        "",
        *_table(_REGION_COLUMNS, region_rows(s)),
        "",
        "## Per tier",
        "",
        *_table(_TIER_COLUMNS, tier_rows(s)),
        "",
    ]
    return "\n".join(lines)


def figures_json(result: RegionsResult) -> dict[str, object]:
    """The summary as plain data (NaN as None), for `chatctl simulate --json`."""
    return {
        "scenario": result.scenario.name,
        "scale": result.scale,
        "seed": result.seed,
        "summary": _finite(asdict(result.summary)),
    }


def _finite(value: object) -> object:
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write(result: RegionsResult, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, columns, rows in (
        ("regions.csv", _REGION_COLUMNS, region_rows(result.summary)),
        ("tiers.csv", _TIER_COLUMNS, tier_rows(result.summary)),
    ):
        path = folder / name
        with path.open("w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(columns)
            writer.writerows(rows)
        written.append(path)
    summary = folder / "summary.md"
    summary.write_text(summary_text(result))
    return [summary, *written]
