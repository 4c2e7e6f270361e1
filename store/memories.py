"""Memory entries as both stores keep them: one row per entry, its columns in one order, and
the search's query in each store's full-text language, built from plain words only (the
caller's terms come from domain/memory.py's search_terms: letters and digits)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from store.records import MemoryRecord

COLUMNS = "memory_id, text, pinned, source, created_at, updated_at"


def row_values(memory: MemoryRecord) -> tuple[object, ...]:
    """The row's values in COLUMNS' order."""
    return (memory.memory_id, memory.text, memory.pinned, memory.source, memory.created_at,
            memory.updated_at)  # fmt: skip


def from_row(row: Any) -> MemoryRecord:
    values = dict(row)
    values["pinned"] = bool(values["pinned"])
    return MemoryRecord(**values)


def plain(terms: Sequence[str]) -> list[str]:
    """The terms that are words (letters and digits): nothing else may reach a query."""
    return [term for term in terms if term and term.isalnum()]


def fts5_match(terms: Sequence[str]) -> str:
    """An FTS5 MATCH of any of the terms, each quoted (a term could be a keyword: OR, NEAR)."""
    return " OR ".join(f'"{term}"' for term in plain(terms))


def tsquery(terms: Sequence[str]) -> str:
    """A PostgreSQL to_tsquery text of any of the terms."""
    return " | ".join(plain(terms))
