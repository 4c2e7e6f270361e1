"""PostgreSQL store for users and conversations: the same behaviour as SqliteStore, for a fleet.

Every gateway and scheduler shares one database through its own connection pool, so the
writes that SQLite serializes with BEGIN IMMEDIATE take row locks here instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

import asyncpg

from domain.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from domain.types import Role, Tier
from store import captured_prompts, migrations
from store.postgres_files import PostgresFiles
from store.postgres_memories import PostgresMemories
from store.records import (
    CapturedPrompt,
    ConversationRecord,
    FeedbackRecord,
    MessageRecord,
    NewMessage,
    ServingRecord,
    UserRecord,
)

_CONVERSATION_COLUMNS = (
    "user_id, conversation_id, title, model, summary, summary_upto_seq, total_tokens, "
    "created_at, updated_at, pool, summary_tokens, pinned, pinned_tokens, region"
)
_MESSAGE_COLUMNS = (
    "conversation_id, seq, message_id, parent_seq, role, content, tokens, model, replica_id, "
    "finish, created_at, region"
)
_USER_COLUMNS = "user_id, tier, token_hash, created_at"
_FEEDBACK_COLUMNS = "message_id, conversation_id, rating, comment, version, created_at, updated_at"
# A new rating replaces the earlier one; the first rating's time stays.
_FEEDBACK_UPDATE = (
    "ON CONFLICT (user_id, message_id) DO UPDATE SET rating = excluded.rating, "
    "comment = excluded.comment, version = excluded.version, updated_at = excluded.updated_at"
)
_SERVING_COLUMNS = (
    "message_id, conversation_id, version, slice, routed_pool, budget, served_pool, created_at"
)
_MESSAGE_ID_CONSTRAINT = "messages_message_id_unique"  # named in 001_init.sql
# Any fixed key will do; every process that migrates this database must use the same one.
_MIGRATION_LOCK_KEY = 0x63686174_73746F72  # "chatstor"
# A database behind a silent link (a partition: no RST, no error) held each call, and the
# user's request with it, for as long as TCP retried: minutes. Past this a connect, a wait for
# a pooled connection or a statement fails, and the caller is told UNAVAILABLE. Generous: a
# statement here takes milliseconds.
CALL_TIMEOUT_S = 5.0
# The database could not be reached, or stopped answering: the same call may work later.
_UNREACHABLE = (OSError, TimeoutError, asyncpg.PostgresConnectionError,
                asyncpg.CannotConnectNowError)  # fmt: skip
T = TypeVar("T")


def _user(row: asyncpg.Record) -> UserRecord:
    return UserRecord(
        row["user_id"], Tier(row["tier"]), row["token_hash"] is not None, row["created_at"]
    )


def _conversation(row: asyncpg.Record) -> ConversationRecord:
    return ConversationRecord(**dict(row))


def _message(row: asyncpg.Record) -> MessageRecord:
    values = dict(row)
    values["role"] = Role(values["role"])
    return MessageRecord(**values)


def _count(status: str) -> int:
    """Rows touched, from a command tag such as 'UPDATE 1' or 'DELETE 0'."""
    return int(status.rsplit(" ", 1)[-1])


@contextlib.contextmanager
def _driver_errors() -> Iterator[None]:
    try:
        yield
    # SQLite stores NUL characters but PostgreSQL text cannot: say so, not a driver error.
    except asyncpg.CharacterNotInRepertoireError as exc:
        raise InvalidArgument("text must not contain NUL characters") from exc
    except _UNREACHABLE as exc:
        raise Unavailable(f"the database is unreachable ({type(exc).__name__})") from exc


class PostgresStore(PostgresMemories, PostgresFiles):
    def __init__(self, dsn: str, min_size: int = 1, max_size: int = 10) -> None:
        self._dsn = dsn
        self._min_size = min_size
        self._max_size = max_size
        self._pool: asyncpg.Pool | None = None
        # Calls past CALL_TIMEOUT_S, cancelled and ending in the background.
        self._abandoned: set[asyncio.Future[Any]] = set()

    async def open(self) -> None:
        pool = await asyncpg.create_pool(
            self._dsn,
            min_size=self._min_size,
            max_size=self._max_size,
            timeout=CALL_TIMEOUT_S,
            command_timeout=CALL_TIMEOUT_S,
        )
        try:
            async with pool.acquire() as conn:
                await self._migrate(conn)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def close(self) -> None:
        if self._pool is not None:
            if self._abandoned:
                # Their connections wait on a dead link: closing would wait for them too.
                self._pool.terminate()
            else:
                await self._pool.close()
            self._pool = None

    async def _bounded(self, call: Awaitable[T]) -> T:
        """One call to the database, its errors as domain errors, answered within
        CALL_TIMEOUT_S. A call past that is cancelled and left to end in the background: a
        cancelled statement's connection is let go only once its cancel request reached the
        server, over the same link (command_timeout more)."""
        task = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({task}, timeout=CALL_TIMEOUT_S)
        except asyncio.CancelledError:
            task.cancel()
            raise
        if not done:
            task.cancel()
            self._abandoned.add(task)
            task.add_done_callback(self._forget)
            raise Unavailable(f"the database did not answer within {CALL_TIMEOUT_S:g} s")
        with _driver_errors():
            return task.result()

    def _forget(self, task: asyncio.Future[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # its caller was told already

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("the store is not open")
        return self._pool

    @staticmethod
    async def _migrate(conn: asyncpg.Connection) -> None:
        # The transaction-scoped lock makes a second process starting at once wait here, then
        # find the versions the first one applied; even CREATE TABLE IF NOT EXISTS races without.
        async with conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK_KEY)
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                "applied_at DOUBLE PRECISION NOT NULL, code_floor INTEGER NOT NULL DEFAULT 0)"
            )
            # A table from before code_floor: every migration until then was an expansion.
            await conn.execute(
                "ALTER TABLE schema_migrations "
                "ADD COLUMN IF NOT EXISTS code_floor INTEGER NOT NULL DEFAULT 0"
            )
            rows = await conn.fetch("SELECT version, code_floor FROM schema_migrations")
            known = migrations.load("postgres")
            applied = {row[0]: row[1] for row in rows}
            for migration in migrations.pending(known, applied):
                await conn.execute(migration.script)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at, code_floor) "
                    "VALUES ($1, $2, $3)",
                    migration.version, time.time(), migration.code_floor,
                )  # fmt: skip
        migrations.report_newer(known, applied)

    async def schema_version(self) -> int:
        version = await self.pool.fetchval("SELECT max(version) FROM schema_migrations")
        return int(version or 0)

    async def _fetchrow(self, sql: str, *args: object) -> asyncpg.Record | None:
        return await self._bounded(self.pool.fetchrow(sql, *args))

    async def _fetch(self, sql: str, *args: object) -> list[asyncpg.Record]:
        return list(await self._bounded(self.pool.fetch(sql, *args)))

    async def _execute(self, sql: str, *args: object) -> int:
        return _count(await self._bounded(self.pool.execute(sql, *args)))

    # Users ------------------------------------------------------------------------------------

    async def create_user(self, user_id: str, tier: Tier, token_hash: str) -> UserRecord:
        now = time.time()
        try:
            await self._execute(
                "INSERT INTO users (user_id, tier, token_hash, created_at) VALUES ($1, $2, $3, $4)",
                user_id,
                tier.value,
                token_hash,
                now,
            )
        except asyncpg.UniqueViolationError as exc:
            raise AlreadyExists(f"user {user_id!r} already exists") from exc
        return UserRecord(user_id, tier, True, now)

    async def user_by_token_hash(self, token_hash: str) -> UserRecord | None:
        row = await self._fetchrow(
            f"SELECT {_USER_COLUMNS} FROM users WHERE token_hash = $1", token_hash
        )
        return _user(row) if row else None

    async def get_user(self, user_id: str) -> UserRecord:
        row = await self._fetchrow(f"SELECT {_USER_COLUMNS} FROM users WHERE user_id = $1", user_id)
        if row is None:
            raise NotFound(f"no user {user_id!r}")
        return _user(row)

    async def list_users(self) -> list[UserRecord]:
        rows = await self._fetch(f"SELECT {_USER_COLUMNS} FROM users ORDER BY user_id")
        return [_user(row) for row in rows]

    async def set_user_tier(self, user_id: str, tier: Tier) -> UserRecord:
        await self._update_user(
            "UPDATE users SET tier = $1 WHERE user_id = $2", tier.value, user_id
        )
        return await self.get_user(user_id)

    async def set_user_token_hash(self, user_id: str, token_hash: str | None) -> None:
        try:
            await self._update_user(
                "UPDATE users SET token_hash = $1 WHERE user_id = $2", token_hash, user_id
            )
        except asyncpg.UniqueViolationError as exc:
            raise AlreadyExists("another user already has this token") from exc

    async def delete_user(self, user_id: str) -> None:
        await self._bounded(self._delete_user(user_id))

    async def _delete_user(self, user_id: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            # The conversations' rows cascade to everything kept with their messages.
            await conn.execute("DELETE FROM conversations WHERE user_id = $1", user_id)
            await conn.execute("DELETE FROM memories WHERE user_id = $1", user_id)
            # The files' rows cascade to their passages.
            await conn.execute("DELETE FROM files WHERE user_id = $1", user_id)
            if _count(await conn.execute("DELETE FROM users WHERE user_id = $1", user_id)) == 0:
                raise NotFound(f"no user {user_id!r}")

    async def _update_user(self, sql: str, value: object, user_id: str) -> None:
        if await self._execute(sql, value, user_id) == 0:
            raise NotFound(f"no user {user_id!r}")

    # Conversations -----------------------------------------------------------------------------

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord:
        row = await self._fetchrow(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
            "WHERE user_id = $1 AND conversation_id = $2",
            user_id,
            conversation_id,
        )
        if row is None:
            raise NotFound(f"no conversation {conversation_id!r}")
        return _conversation(row)

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]:
        before = updated_before if updated_before is not None else float("inf")
        rows = await self._fetch(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
            "WHERE user_id = $1 AND updated_at < $2 ORDER BY updated_at DESC LIMIT $3",
            user_id,
            before,
            # SQLite reads a negative LIMIT as no limit; PostgreSQL refuses it.
            limit if limit >= 0 else None,
        )
        return [_conversation(row) for row in rows]

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None:
        deleted = await self._execute(
            "DELETE FROM conversations WHERE user_id = $1 AND conversation_id = $2",
            user_id,
            conversation_id,
        )
        if deleted == 0:
            raise NotFound(f"no conversation {conversation_id!r}")

    async def set_summary(
        self,
        user_id: str,
        conversation_id: str,
        summary: str,
        summary_tokens: int,
        upto_seq: int,
        pinned: str,
        pinned_tokens: int,
        expected_upto_seq: int,
    ) -> bool:
        """Compare-and-set on summary_upto_seq; updated_at stays: it orders the user's list by
        what the user did, and a summary is background work."""
        updated = await self._execute(
            "UPDATE conversations SET summary = $1, summary_tokens = $2, summary_upto_seq = $3, "
            "pinned = $4, pinned_tokens = $5 "
            "WHERE user_id = $6 AND conversation_id = $7 AND summary_upto_seq = $8",
            summary, summary_tokens, upto_seq, pinned, pinned_tokens, user_id, conversation_id,
            expected_upto_seq,
        )  # fmt: skip
        if updated == 0:
            await self.get_conversation(user_id, conversation_id)  # NotFound when not theirs
            return False
        return True

    async def get_message(self, user_id: str, message_id: str) -> MessageRecord:
        row = await self._fetchrow(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE user_id = $1 AND message_id = $2",
            user_id,
            message_id,
        )
        if row is None:
            raise NotFound(f"no message {message_id!r}")
        return _message(row)

    async def delete_response(self, user_id: str, response_id: str) -> None:
        """Marks the message response_id deleted as a response; NotFound for no such message
        or one already deleted."""
        message = await self.get_message(user_id, response_id)
        inserted = await self._execute(
            "INSERT INTO deleted_responses (user_id, conversation_id, response_id, deleted_at) "
            "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
            user_id,
            message.conversation_id,
            response_id,
            time.time(),
        )
        if inserted == 0:
            raise NotFound(f"no response {response_id!r}")

    async def response_deleted(self, user_id: str, response_id: str) -> bool:
        row = await self._fetchrow(
            "SELECT 1 FROM deleted_responses WHERE user_id = $1 AND response_id = $2",
            user_id,
            response_id,
        )
        return row is not None

    async def list_messages(self, user_id: str, conversation_id: str) -> list[MessageRecord]:
        await self.get_conversation(user_id, conversation_id)
        rows = await self._fetch(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE user_id = $1 AND conversation_id = $2 ORDER BY seq",
            user_id,
            conversation_id,
        )
        return [_message(row) for row in rows]

    async def newest_message(self, user_id: str, conversation_id: str) -> MessageRecord | None:
        row = await self._fetchrow(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE user_id = $1 AND conversation_id = $2 ORDER BY seq DESC LIMIT 1",
            user_id,
            conversation_id,
        )
        return _message(row) if row else None

    async def add_message(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str = ""
    ) -> MessageRecord:
        """Appends a turn; the first turn of a new conversation id creates the conversation."""
        now = time.time()
        try:
            seq = await self._bounded(
                self._add_message(user_id, conversation_id, message, title, now)
            )
        except asyncpg.UniqueViolationError as exc:
            # Only a reused id is the caller's doing; a clashing seq would be a bug here.
            if exc.constraint_name != _MESSAGE_ID_CONSTRAINT:
                raise
            raise AlreadyExists(f"message {message.message_id!r} already exists") from exc
        return MessageRecord(
            conversation_id,
            seq,
            message.message_id,
            message.parent_seq,
            message.role,
            message.content,
            message.tokens,
            message.model,
            message.replica_id,
            message.finish,
            now,
            message.region,
        )

    async def _add_message(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str, now: float
    ) -> int:
        """The turn's transaction; its seq."""
        async with self.pool.acquire() as conn, conn.transaction():
            await _lock_conversation(conn, user_id, conversation_id, title, message.model, now)
            seq = await _insert_message(conn, user_id, conversation_id, message, now)
            recounted = await _recount_parent(conn, user_id, conversation_id, message)
            counted = message.tokens + recounted
            await conn.execute(
                "UPDATE conversations SET updated_at = $1, total_tokens = total_tokens + $2, "
                "model = CASE WHEN $3 <> '' THEN $3 ELSE model END, "
                "pool = CASE WHEN $6 <> '' THEN $6 ELSE pool END, "
                "region = CASE WHEN $7 <> '' THEN $7 ELSE region END "
                "WHERE user_id = $4 AND conversation_id = $5",
                now,
                counted,
                message.model,
                user_id,
                conversation_id,
                message.pool,
                message.region,
            )
        return seq

    async def record_serving(self, user_id: str, serving: ServingRecord) -> None:
        try:
            await self._execute(
                f"INSERT INTO message_serving (user_id, {_SERVING_COLUMNS}) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                user_id, serving.message_id, serving.conversation_id, serving.version,
                serving.slice, serving.routed_pool, serving.budget, serving.served_pool,
                time.time(),
            )  # fmt: skip
        except (asyncpg.UniqueViolationError, asyncpg.ForeignKeyViolationError) as exc:
            raise NotFound(f"no message {serving.message_id!r} to record, or recorded") from exc

    async def serving_of(self, user_id: str, message_id: str) -> ServingRecord:
        row = await self._fetchrow(
            f"SELECT {_SERVING_COLUMNS} FROM message_serving "
            "WHERE user_id = $1 AND message_id = $2",
            user_id,
            message_id,
        )
        if row is None:
            raise NotFound(f"no serving record of message {message_id!r}")
        return ServingRecord(**dict(row))

    async def conversation_version(self, user_id: str, conversation_id: str) -> str:
        row = await self._fetchrow(
            "SELECT version FROM message_serving WHERE user_id = $1 AND conversation_id = $2 "
            "ORDER BY created_at LIMIT 1",
            user_id,
            conversation_id,
        )
        return str(row["version"]) if row else ""

    async def rate_message(self, user_id: str, feedback: FeedbackRecord) -> str:
        now = time.time()
        try:
            # The earlier rating is read from the statement's snapshot, before its own write.
            row = await self._fetchrow(
                "WITH earlier AS (SELECT rating FROM message_feedback "
                "WHERE user_id = $1 AND message_id = $2) "
                f"INSERT INTO message_feedback (user_id, {_FEEDBACK_COLUMNS}) "
                f"VALUES ($1, $2, $3, $4, $5, $6, $7, $7) {_FEEDBACK_UPDATE} "
                "RETURNING (SELECT rating FROM earlier) AS earlier",
                user_id, feedback.message_id, feedback.conversation_id, feedback.rating,
                feedback.comment, feedback.version, now,
            )  # fmt: skip
        except asyncpg.ForeignKeyViolationError as exc:
            raise NotFound(f"no message {feedback.message_id!r} to rate") from exc
        return str(row["earlier"] or "") if row else ""

    async def feedback_of(self, user_id: str, message_id: str) -> FeedbackRecord:
        row = await self._fetchrow(
            f"SELECT {_FEEDBACK_COLUMNS} FROM message_feedback "
            "WHERE user_id = $1 AND message_id = $2",
            user_id,
            message_id,
        )
        if row is None:
            raise NotFound(f"no rating of message {message_id!r}")
        return FeedbackRecord(**dict(row))

    async def capture_prompt(self, user_id: str, prompt: CapturedPrompt) -> None:
        try:
            await self._execute(
                f"INSERT INTO captured_prompts (user_id, {captured_prompts.COLUMNS}) "
                f"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) "
                f"{captured_prompts.ON_CONFLICT}",
                user_id,
                *captured_prompts.row_values(prompt, time.time()),
            )
        except asyncpg.ForeignKeyViolationError as exc:
            raise NotFound(f"no message {prompt.message_id!r} to capture") from exc

    async def captured_prompt(self, user_id: str, message_id: str) -> CapturedPrompt:
        row = await self._fetchrow(
            f"SELECT {captured_prompts.COLUMNS} FROM captured_prompts "
            "WHERE user_id = $1 AND message_id = $2",
            user_id,
            message_id,
        )
        if row is None:
            raise NotFound(f"no captured prompt of message {message_id!r}")
        return captured_prompts.from_row(row)

    async def forget_prompts(self, captured_before: float) -> int:
        return await self._execute(
            "DELETE FROM captured_prompts WHERE created_at < $1", captured_before
        )


async def _lock_conversation(
    conn: asyncpg.Connection,
    user_id: str,
    conversation_id: str,
    title: str,
    model: str,
    now: float,
) -> None:
    """Creates the conversation if new, then holds its row lock until the transaction ends.

    The lock serializes writers of one conversation, so each reads the max seq its predecessor
    committed. A concurrent delete can remove the row between the two statements: create again.
    """
    while True:
        await conn.execute(
            "INSERT INTO conversations (user_id, conversation_id, title, model, created_at, "
            "updated_at) VALUES ($1, $2, $3, $4, $5, $5) "
            "ON CONFLICT (user_id, conversation_id) DO NOTHING",
            user_id,
            conversation_id,
            title,
            model,
            now,
        )
        locked = await conn.fetchval(
            "SELECT true FROM conversations WHERE user_id = $1 AND conversation_id = $2 FOR UPDATE",
            user_id,
            conversation_id,
        )
        if locked:
            return


async def _recount_parent(
    conn: asyncpg.Connection, user_id: str, conversation_id: str, message: NewMessage
) -> int:
    """Stores the parent's exact count, if the answer brought one; what it changes in the
    conversation's total. Inside the append's transaction, which holds the conversation."""
    if not message.parent_tokens or message.parent_seq is None:
        return 0
    old = await conn.fetchval(
        "SELECT tokens FROM messages WHERE user_id = $1 AND conversation_id = $2 AND seq = $3",
        user_id, conversation_id, message.parent_seq,
    )  # fmt: skip
    if old is None:
        return 0
    await conn.execute(
        "UPDATE messages SET tokens = $1 WHERE user_id = $2 AND conversation_id = $3 AND seq = $4",
        message.parent_tokens, user_id, conversation_id, message.parent_seq,
    )  # fmt: skip
    return message.parent_tokens - int(old)


async def _insert_message(
    conn: asyncpg.Connection, user_id: str, conversation_id: str, message: NewMessage, now: float
) -> int:
    seq = await conn.fetchval(
        "SELECT coalesce(max(seq), 0) + 1 FROM messages "
        "WHERE user_id = $1 AND conversation_id = $2",
        user_id,
        conversation_id,
    )
    await conn.execute(
        f"INSERT INTO messages (user_id, {_MESSAGE_COLUMNS}) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        user_id,
        conversation_id,
        seq,
        message.message_id,
        message.parent_seq,
        message.role.value,
        message.content,
        message.tokens,
        message.model,
        message.replica_id,
        message.finish,
        now,
        message.region,
    )
    return int(seq)
