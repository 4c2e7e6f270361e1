"""Users' files as both stores keep them: one row per file with its whole content, one per
passage, their columns in one order, and what both stores check and order alike. A search's
query is built as the memory search's is (store/memories.py), from plain words only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from store.records import FilePassage, FileRecord

COLUMNS = "file_id, filename, purpose, bytes, passages, created_at"
# A passage as the stores return it, with its file's name: read from the passages as `p`
# joined to their file as `f` (ITS_FILE).
PASSAGE_COLUMNS = "p.file_id, f.filename, p.idx, p.text"
ITS_FILE = "JOIN files AS f ON f.user_id = p.user_id AND f.file_id = p.file_id"
LIST_ORDER = "ORDER BY created_at DESC, file_id"


def check_passages(record: FileRecord, passages: Sequence[str]) -> None:
    """A record that counts other passages than it comes with would tell its readers of
    passages that are not there, or hide some: refused before anything is stored."""
    if len(passages) != record.passages:
        raise ValueError(
            f"file {record.file_id!r} says {record.passages} passages and comes with "
            f"{len(passages)}"
        )


def row_values(record: FileRecord, content: str) -> tuple[object, ...]:
    """The row's values in COLUMNS' order, then the content."""
    return (record.file_id, record.filename, record.purpose, record.bytes, record.passages,
            record.created_at, content)  # fmt: skip


def from_row(row: Any) -> FileRecord:
    return FileRecord(**dict(row))


def passage_from_row(row: Any) -> FilePassage:
    return FilePassage(row["file_id"], row["filename"], row["idx"], row["text"])


def possible(passage_refs: Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """The refs that could name a stored passage. A citation's ref comes from a model's answer,
    and one no passage can have (a negative index, one past PostgreSQL's integer, a NUL its
    text refuses) finds nothing on SQLite: left out here, it finds nothing on PostgreSQL
    either, rather than failing there."""
    return [(file_id, index) for file_id, index in passage_refs
            if 0 <= index < 2**31 and "\x00" not in file_id]  # fmt: skip


def in_order(
    passage_refs: Sequence[tuple[str, int]], found: Iterable[FilePassage]
) -> list[FilePassage]:
    """The passages found, in the order their refs were asked (a ref asked twice, twice);
    those not found left out."""
    by_ref = {(passage.file_id, passage.index): passage for passage in found}
    asked = [(file_id, index) for file_id, index in passage_refs]
    return [by_ref[ref] for ref in asked if ref in by_ref]
