"""PostgresStore's users' files (store/base.py's FileStore): the files with their passages,
the passages' generated tsvector under a GIN index (migration 011), ranked by ts_rank."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, TypeVar

import asyncpg

from domain.errors import AlreadyExists, NotFound
from store import files, memories
from store.records import FilePassage, FileRecord

T = TypeVar("T")


class PostgresFiles:
    """Mixed into PostgresStore, whose pool (`pool`) and bounded calls (`_bounded`, `_fetch`,
    `_execute`) it uses."""

    if TYPE_CHECKING:  # PostgresStore's own, declared for the type checker

        @property
        def pool(self) -> asyncpg.Pool: ...

        async def _bounded(self, call: Awaitable[T]) -> T: ...

        async def _fetch(self, sql: str, *args: object) -> list[asyncpg.Record]: ...

        async def _execute(self, sql: str, *args: object) -> int: ...

    async def add_file(
        self, user_id: str, record: FileRecord, content: str, passages: Sequence[str]
    ) -> None:
        files.check_passages(record, passages)
        try:
            await self._bounded(self._add_file(user_id, record, content, passages))
        except asyncpg.UniqueViolationError as exc:
            raise AlreadyExists(f"a file {record.file_id!r} exists already") from exc

    async def _add_file(
        self, user_id: str, record: FileRecord, content: str, passages: Sequence[str]
    ) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                f"INSERT INTO files (user_id, {files.COLUMNS}, content) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                user_id, *files.row_values(record, content),
            )  # fmt: skip
            await conn.executemany(
                "INSERT INTO file_passages (user_id, file_id, idx, text) VALUES ($1, $2, $3, $4)",
                [(user_id, record.file_id, index, text) for index, text in enumerate(passages)],
            )

    async def list_files(self, user_id: str) -> list[FileRecord]:
        rows = await self._fetch(
            f"SELECT {files.COLUMNS} FROM files WHERE user_id = $1 {files.LIST_ORDER}", user_id
        )
        return [files.from_row(row) for row in rows]

    async def get_file(self, user_id: str, file_id: str) -> FileRecord:
        rows = await self._fetch(
            f"SELECT {files.COLUMNS} FROM files WHERE user_id = $1 AND file_id = $2",
            user_id, file_id,
        )  # fmt: skip
        if not rows:
            raise NotFound(f"no file {file_id!r}")
        return files.from_row(rows[0])

    async def file_content(self, user_id: str, file_id: str) -> str:
        rows = await self._fetch(
            "SELECT content FROM files WHERE user_id = $1 AND file_id = $2", user_id, file_id
        )
        if not rows:
            raise NotFound(f"no file {file_id!r}")
        return str(rows[0][0])

    async def delete_file(self, user_id: str, file_id: str) -> None:
        # The file's passages, and their lexemes, go by the foreign key's cascade.
        changed = await self._execute(
            "DELETE FROM files WHERE user_id = $1 AND file_id = $2", user_id, file_id
        )
        if changed == 0:
            raise NotFound(f"no file {file_id!r}")

    async def search_passages(
        self, user_id: str, terms: Sequence[str], limit: int
    ) -> list[FilePassage]:
        query = memories.tsquery(terms)
        if not query or limit <= 0:
            return []
        # A query of stop words only is empty: it matches nothing, as FTS5's would.
        rows = await self._fetch(
            f"SELECT {files.PASSAGE_COLUMNS} FROM file_passages AS p {files.ITS_FILE}, "
            "to_tsquery('english', $2) AS query WHERE p.user_id = $1 AND p.lexemes @@ query "
            "ORDER BY ts_rank(p.lexemes, query) DESC, p.file_id, p.idx LIMIT $3",
            user_id, query, limit,
        )  # fmt: skip
        return [files.passage_from_row(row) for row in rows]

    async def get_passages(
        self, user_id: str, passage_refs: Sequence[tuple[str, int]]
    ) -> list[FilePassage]:
        refs = files.possible(passage_refs)
        if not refs:
            return []
        file_ids = [file_id for file_id, _ in refs]
        indexes = [index for _, index in refs]
        rows = await self._fetch(
            f"SELECT {files.PASSAGE_COLUMNS} FROM file_passages AS p {files.ITS_FILE} "
            "WHERE p.user_id = $1 AND (p.file_id, p.idx) IN "
            "(SELECT * FROM unnest($2::text[], $3::integer[]))",
            user_id, file_ids, indexes,
        )  # fmt: skip
        return files.in_order(refs, (files.passage_from_row(row) for row in rows))
