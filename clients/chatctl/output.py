"""What chatctl prints: tables and numbers for people, --json for programs, and its errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import fields, is_dataclass
from datetime import datetime
from typing import Any


class CtlError(Exception):
    """A failure chatctl explains itself (no address, nothing running...): exit 1."""


def plain(value: Any) -> Any:
    """Dataclasses, datetimes and lists as JSON values."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def print_json(value: Any) -> None:
    print(json.dumps(plain(value)), flush=True)


def emit(as_json: bool, value: Any, text: str) -> None:
    """One result: value as JSON for --json, else text for people."""
    if as_json:
        print_json(value)
    else:
        print(text, flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(headers), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(line.rstrip() for line in lines)


def table_or(headers: Sequence[str], rows: Sequence[Sequence[object]], empty: str) -> str:
    """The table, or `empty` (say "no users") where there are no rows to show."""
    return table(headers, rows) if rows else empty


def duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 10:
        return f"{seconds:.1f}s"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m {int(seconds % 60)}s"
    return f"{int(seconds // 3600)}h {int(seconds % 3600 // 60)}m"


def percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def when(at: datetime) -> str:
    return at.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def note(text: str) -> None:
    """Chrome for people (prompts, summaries) goes to stderr, so stdout stays the data."""
    print(text, file=sys.stderr, flush=True)
