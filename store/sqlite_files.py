"""SqliteStore's users' files (store/base.py's FileStore): the files with their passages, and
the passages' FTS5 index kept in step by triggers (migration 011), ranked by FTS5's bm25."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

import aiosqlite

from domain.errors import AlreadyExists, NotFound
from store import files, memories
from store.records import FilePassage, FileRecord


class SqliteFiles:
    """Mixed into SqliteStore, whose connection (`db`), reads (`_all`) and write lock
    (`_writing`) it uses."""

    if TYPE_CHECKING:  # SqliteStore's own, declared for the type checker

        @property
        def db(self) -> aiosqlite.Connection: ...

        _writing: asyncio.Lock

        async def _all(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]: ...

    async def add_file(
        self, user_id: str, record: FileRecord, content: str, passages: Sequence[str]
    ) -> None:
        files.check_passages(record, passages)
        async with self._writing:
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                await self.db.execute(
                    f"INSERT INTO files (user_id, {files.COLUMNS}, content) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (user_id, *files.row_values(record, content)),
                )
                await self.db.executemany(
                    "INSERT INTO file_passages (user_id, file_id, idx, text) VALUES (?, ?, ?, ?)",
                    [(user_id, record.file_id, index, text)
                     for index, text in enumerate(passages)],
                )  # fmt: skip
                await self.db.commit()
            except sqlite3.IntegrityError as exc:
                await self.db.rollback()
                raise AlreadyExists(f"a file {record.file_id!r} exists already") from exc
            except BaseException:
                await self.db.rollback()
                raise

    async def list_files(self, user_id: str) -> list[FileRecord]:
        rows = await self._all(
            f"SELECT {files.COLUMNS} FROM files WHERE user_id = ? {files.LIST_ORDER}", (user_id,)
        )
        return [files.from_row(row) for row in rows]

    async def get_file(self, user_id: str, file_id: str) -> FileRecord:
        rows = await self._all(
            f"SELECT {files.COLUMNS} FROM files WHERE user_id = ? AND file_id = ?",
            (user_id, file_id),
        )
        if not rows:
            raise NotFound(f"no file {file_id!r}")
        return files.from_row(rows[0])

    async def file_content(self, user_id: str, file_id: str) -> str:
        rows = await self._all(
            "SELECT content FROM files WHERE user_id = ? AND file_id = ?", (user_id, file_id)
        )
        if not rows:
            raise NotFound(f"no file {file_id!r}")
        return str(rows[0][0])

    async def delete_file(self, user_id: str, file_id: str) -> None:
        # The file's passages go by the foreign key's cascade, and out of the index by its
        # trigger, in the same statement.
        async with self._writing:
            try:
                cursor = await self.db.execute(
                    "DELETE FROM files WHERE user_id = ? AND file_id = ?", (user_id, file_id)
                )
                await self.db.commit()
            except BaseException:
                await self.db.rollback()
                raise
        if cursor.rowcount == 0:
            raise NotFound(f"no file {file_id!r}")

    async def search_passages(
        self, user_id: str, terms: Sequence[str], limit: int
    ) -> list[FilePassage]:
        match = memories.fts5_match(terms)
        if not match or limit <= 0:
            return []
        rows = await self._all(
            f"SELECT {files.PASSAGE_COLUMNS} FROM file_passages_index "
            f"JOIN file_passages AS p ON p.rowid = file_passages_index.rowid {files.ITS_FILE} "
            "WHERE file_passages_index MATCH ? AND p.user_id = ? "
            "ORDER BY bm25(file_passages_index), p.file_id, p.idx LIMIT ?",
            (match, user_id, limit),
        )
        return [files.passage_from_row(row) for row in rows]

    async def get_passages(
        self, user_id: str, passage_refs: Sequence[tuple[str, int]]
    ) -> list[FilePassage]:
        refs = files.possible(passage_refs)
        if not refs:
            return []
        # The refs as one JSON parameter: any number of them, under SQLite's bound on a
        # statement's parameters.
        asked = json.dumps([[file_id, index] for file_id, index in refs])
        rows = await self._all(
            f"SELECT {files.PASSAGE_COLUMNS} FROM file_passages AS p {files.ITS_FILE} "
            "WHERE p.user_id = ? AND (p.file_id, p.idx) IN "
            "(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?))",
            (user_id, asked),
        )
        return files.in_order(refs, (files.passage_from_row(row) for row in rows))
