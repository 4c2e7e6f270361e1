"""Writes a scenario's results: a markdown table, CSV files and PNG plots in a report folder.
The only module of fleet that touches files; matplotlib runs on its Agg backend (no display)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, never a window

import matplotlib.pyplot as plt
import numpy as np

from fleet.scenarios import ScenarioResult

_COLUMNS = (
    "variant",
    "tier",
    "messages",
    "answered",
    "timed out",
    "refused busy",
    "refused budget",
    "TTFT p50 s",
    "TTFT p95 s",
    "TTFT p99 s",
    "started <= 2 s",
    "tok/s p50",
    "tok/s p5",
)


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1%}"


def _num(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def tier_rows(result: ScenarioResult) -> list[list[str]]:
    rows = []
    for label, summary in result.summaries.items():
        for tier, f in summary.tiers.items():
            rows.append(
                [
                    label,
                    tier,
                    f"{f.messages:,}",
                    _pct(f.answered_share),
                    _pct(f.timed_out_share),
                    _pct(f.refused_busy_share),
                    _pct(f.refused_budget_share),
                    _num(f.ttft_p50_s),
                    _num(f.ttft_p95_s),
                    _num(f.ttft_p99_s),
                    _pct(f.started_within_2s_share),
                    _num(f.tokens_per_s_p50, 1),
                    _num(f.tokens_per_s_p5, 1),
                ]
            )
    return rows


def fleet_rows(result: ScenarioResult) -> list[list[str]]:
    """Per variant: rate, cache, busy share and prefill GPUs, at full scale."""
    rows = []
    for label, s in result.summaries.items():
        for pool in s.prefill_gpus_mean:
            rows.append(
                [
                    label,
                    pool,
                    _num(s.full_scale(s.messages_per_s), 0),
                    _pct(s.timed_out_share),
                    _pct(s.history_cached_share),
                    _pct(s.gpu_busy_share[pool]),
                    _pct(s.ladder_busy_share[pool]),
                    _num(s.full_scale(s.prefill_gpus_mean[pool]), 0),
                    _num(s.full_scale(s.prefill_gpus_peak[pool]), 0),
                    _num(s.full_scale(s.prefill_gpus_needed[pool]), 0),
                    f"{s.moved}",
                    _num(s.move_pause_p50_s),
                    f"{s.lost}",
                ]
            )
    return rows


_FLEET_COLUMNS = (
    "variant",
    "pool",
    "messages/s, all pools (full)",
    "timed out, all",
    "history cached, all",
    "GPUs stepping",
    "busy (ladder's view)",
    "prefill GPUs mean",
    "prefill GPUs peak 10 s",
    "prefill GPUs needed",
    "moved",
    "move pause p50 s",
    "lost",
)


def _markdown(columns: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def summary_text(result: ScenarioResult) -> str:
    """The scenario's tables and its figures against sizing 000, as markdown."""
    scenario = result.scenario
    lines = [
        f"# {scenario.title}",
        "",
        f"Scenario `{scenario.name}`, scale {result.scale:.4f} of the region (GPU counts and "
        f"messages/s shown at full scale), seed {result.seed}, measured from "
        f"{scenario.warmup_s:.0f} s for {scenario.measure_s:.0f} s of simulated time. "
        "Real time: " + ", ".join(f"{k} {v:.0f} s" for k, v in result.wall_s.items()) + ".",
        "",
        "## Figures against sizing 000",
        "",
        *_markdown(
            ("figure", "spec", "measured", "band", "within"),
            [
                [
                    f.name,
                    f.spec,
                    _num(f.measured, 3),
                    f"{_num(f.low, 3)} .. {_num(f.high, 3)}",
                    "yes" if f.ok else ("NO (known gap, below)" if f.known_gap else "NO"),
                ]
                for f in result.figures()
            ],
        ),
        "",
        *sorted({f"- {f.known_gap}" for f in result.figures() if f.known_gap and not f.ok}),
        "",
        "## Fleet",
        "",
        *_markdown(_FLEET_COLUMNS, fleet_rows(result)),
        "",
        "## Per tier",
        "",
        *_markdown(_COLUMNS, tier_rows(result)),
    ]
    return "\n".join(lines) + "\n"


def write(result: ScenarioResult, folder: Path) -> list[Path]:
    """Writes summary.md, tiers.csv, fleet.csv and the plots; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "summary.md", folder / "tiers.csv", folder / "fleet.csv"]
    written[0].write_text(summary_text(result))
    for path, columns, rows in (
        (written[1], _COLUMNS, tier_rows(result)),
        (written[2], _FLEET_COLUMNS, fleet_rows(result)),
    ):
        with path.open("w", newline="") as out:
            csv.writer(out).writerows([list(columns), *rows])
    written.append(_plot_series(result, folder / "timeline.png"))
    written.append(_plot_ttft(result, folder / "ttft.png"))
    return written


def _plot_series(result: ScenarioResult, path: Path) -> Path:
    """Per variant over time: prefill GPUs per pool (full scale), time-outs and refusals per
    second (full scale), and the rung."""
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    end = int(result.scenario.warmup_s + result.scenario.measure_s)
    for label, recorder in result.recorders.items():
        seconds = np.arange(end)
        for pool in recorder.pools:
            prefill = recorder.series[f"prefill:{pool}"][:end] / result.scale
            axes[0].plot(seconds, _smooth(prefill), label=f"{label}, {pool}")
        failed = recorder.series["timeouts"] + recorder.series["refused"]
        axes[1].plot(seconds, _smooth(failed[:end] / result.scale), label=label)
        axes[2].step(seconds, recorder.series["rung"][:end], where="post", label=label)
    axes[0].set_ylabel("prefill GPUs")
    axes[1].set_ylabel("timed out + refused /s")
    axes[2].set_ylabel("ladder rung")
    axes[2].set_xlabel("simulated seconds")
    for axis in axes:
        axis.axvline(result.scenario.warmup_s, color="grey", linewidth=0.8, linestyle=":")
        if result.scenario.event_at_s is not None:
            axis.axvline(result.scenario.event_at_s, color="red", linewidth=0.8)
        axis.legend(fontsize=7, loc="upper left")
    fig.suptitle(result.scenario.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _plot_ttft(result: ScenarioResult, path: Path) -> Path:
    """Time to first token percentiles per variant and tier."""
    fig, axis = plt.subplots(figsize=(9, 4))
    labels, p50, p95 = [], [], []
    for label, summary in result.summaries.items():
        for tier, f in summary.tiers.items():
            labels.append(f"{label}\n{tier}")
            p50.append(_zero_nan(f.ttft_p50_s))
            p95.append(_zero_nan(f.ttft_p95_s))
    x = np.arange(len(labels))
    axis.bar(x - 0.2, p50, 0.4, label="p50")
    axis.bar(x + 0.2, p95, 0.4, label="p95")
    axis.set_xticks(x, labels, fontsize=7)
    axis.set_ylabel("time to first token, s")
    axis.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _smooth(series: np.ndarray, seconds: int = 5) -> np.ndarray:
    return np.convolve(series, np.ones(seconds) / seconds, mode="same")


def _zero_nan(value: float) -> float:
    return 0.0 if math.isnan(value) else value
