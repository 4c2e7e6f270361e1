"""SQLite store for users and conversations: the local platform's default.

WAL mode lets the scheduler (users) and the gateway (both) share one file across processes.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import aiosqlite

from domain.errors import AlreadyExists, NotFound
from domain.types import Role, Tier
from store import captured_prompts, migrations
from store.records import (
    CapturedPrompt,
    ConversationRecord,
    FeedbackRecord,
    MessageRecord,
    NewMessage,
    ServingRecord,
    UserRecord,
)
from store.sqlite_files import SqliteFiles
from store.sqlite_memories import SqliteMemories

# How long a statement waits for another process's lock on the file.
BUSY_TIMEOUT_S = 10.0
WAL_RETRY_S = 0.02

_CONVERSATION_COLUMNS = (
    "user_id, conversation_id, title, model, summary, summary_upto_seq, total_tokens, "
    "created_at, updated_at, pool, summary_tokens, pinned, pinned_tokens, region"
)
_MESSAGE_COLUMNS = (
    "conversation_id, seq, message_id, parent_seq, role, content, tokens, model, replica_id, "
    "finish, created_at, region"
)

_FEEDBACK_COLUMNS = "message_id, conversation_id, rating, comment, version, created_at, updated_at"
# A new rating replaces the earlier one; the first rating's time stays.
_FEEDBACK_UPDATE = (
    "ON CONFLICT (user_id, message_id) DO UPDATE SET rating = excluded.rating, "
    "comment = excluded.comment, version = excluded.version, updated_at = excluded.updated_at"
)
_SERVING_COLUMNS = (
    "message_id, conversation_id, version, slice, routed_pool, budget, served_pool, created_at"
)


def _user(row: sqlite3.Row) -> UserRecord:
    return UserRecord(
        row["user_id"], Tier(row["tier"]), row["token_hash"] is not None, row["created_at"]
    )


def _conversation(row: sqlite3.Row) -> ConversationRecord:
    return ConversationRecord(*(row[k] for k in _CONVERSATION_COLUMNS.split(", ")))


def _message(row: sqlite3.Row) -> MessageRecord:
    values = dict(row)
    values["role"] = Role(values["role"])
    return MessageRecord(**values)


class SqliteStore(SqliteMemories, SqliteFiles):
    def __init__(self, path: str) -> None:
        self._path = path
        self._db: aiosqlite.Connection | None = None
        # One connection serves every coroutine: its transactions must not interleave.
        self._writing = asyncio.Lock()

    async def open(self) -> None:
        if self._path != ":memory:":
            Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        self._db = await aiosqlite.connect(self._path, timeout=BUSY_TIMEOUT_S)
        try:
            self._db.row_factory = sqlite3.Row
            await self._use_wal()
            # WAL with NORMAL sync cannot corrupt; a power cut may lose the last commits.
            await self._db.execute("PRAGMA synchronous=NORMAL")
            await self._db.execute("PRAGMA foreign_keys=ON")
            await self._migrate()
        except BaseException:
            # aiosqlite's connection runs on a thread that is not a daemon: a store that failed
            # to open (a schema it refuses) and kept it would keep its process from exiting.
            await self.close()
            raise

    async def _use_wal(self) -> None:
        """WAL mode, which lets the scheduler and the gateway share the file. The mode is the
        file's: once one process set it, the others find it set and change nothing. Setting it
        on a new file takes the file whole, and SQLite answers "locked" at once, without its
        busy wait, to a process that asks while another holds it (two services starting on
        one new file): asked again until the busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                if (await self._all("PRAGMA journal_mode"))[0][0] != "wal":
                    await self.db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(WAL_RETRY_S)

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    async def _all(self, sql: str, params: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        # One trip to aiosqlite's thread; a cursor's execute, fetch and close are three.
        return list(await self.db.execute_fetchall(sql, params))

    async def _one(self, sql: str, params: tuple[object, ...] = ()) -> sqlite3.Row | None:
        rows = await self._all(sql, params)
        return rows[0] if rows else None

    @property
    def db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise RuntimeError("the store is not open")
        return self._db

    async def _migrate(self) -> None:
        await self.db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
            "applied_at REAL NOT NULL, code_floor INTEGER NOT NULL DEFAULT 0)"
        )
        columns = {row[1] for row in await self._all("PRAGMA table_info(schema_migrations)")}
        if "code_floor" not in columns:
            # A table from before code_floor: every migration until then was an expansion.
            try:
                await self.db.execute(
                    "ALTER TABLE schema_migrations ADD COLUMN code_floor INTEGER NOT NULL DEFAULT 0"
                )
            except sqlite3.OperationalError:
                pass  # another process added it first
        await self.db.commit()
        rows = await self._all("SELECT version, code_floor FROM schema_migrations")
        known = migrations.load("sqlite")
        applied = {row[0]: row[1] for row in rows}
        for migration in migrations.pending(known, applied):
            # executescript commits on its own, so the version row goes in the same script.
            try:
                await self.db.executescript(
                    f"BEGIN;\n{migration.script}\nINSERT INTO schema_migrations "
                    f"(version, applied_at, code_floor) VALUES ({migration.version}, "
                    f"{time.time()}, {migration.code_floor});\nCOMMIT;"
                )
            except sqlite3.OperationalError:
                # Another process migrated first; its rows are what we wanted.
                await self.db.rollback()
        migrations.report_newer(known, applied)

    async def schema_version(self) -> int:
        row = await self._one("SELECT max(version) FROM schema_migrations")
        return int(row[0] or 0) if row else 0

    # Users ------------------------------------------------------------------------------------

    async def create_user(self, user_id: str, tier: Tier, token_hash: str) -> UserRecord:
        now = time.time()
        try:
            async with self._writing:
                await self._insert_user(user_id, tier, token_hash, now)
        except sqlite3.IntegrityError as exc:
            raise AlreadyExists(f"user {user_id!r} already exists") from exc
        return UserRecord(user_id, tier, True, now)

    async def _insert_user(self, user_id: str, tier: Tier, token_hash: str, now: float) -> None:
        try:
            await self.db.execute(
                "INSERT INTO users (user_id, tier, token_hash, created_at) VALUES (?, ?, ?, ?)",
                (user_id, tier.value, token_hash, now),
            )
            await self.db.commit()
        except sqlite3.IntegrityError:
            await self.db.rollback()
            raise

    async def user_by_token_hash(self, token_hash: str) -> UserRecord | None:
        row = await self._one("SELECT * FROM users WHERE token_hash = ?", (token_hash,))
        return _user(row) if row else None

    async def get_user(self, user_id: str) -> UserRecord:
        row = await self._one("SELECT * FROM users WHERE user_id = ?", (user_id,))
        if row is None:
            raise NotFound(f"no user {user_id!r}")
        return _user(row)

    async def list_users(self) -> list[UserRecord]:
        return [_user(row) for row in await self._all("SELECT * FROM users ORDER BY user_id")]

    async def set_user_tier(self, user_id: str, tier: Tier) -> UserRecord:
        await self._update_user(
            "UPDATE users SET tier = ? WHERE user_id = ?", (tier.value, user_id)
        )
        return await self.get_user(user_id)

    async def set_user_token_hash(self, user_id: str, token_hash: str | None) -> None:
        await self._update_user(
            "UPDATE users SET token_hash = ? WHERE user_id = ?", (token_hash, user_id)
        )

    async def delete_user(self, user_id: str) -> None:
        async with self._writing:
            await self.db.execute("BEGIN IMMEDIATE")
            try:
                # The conversations' rows cascade to everything kept with their messages.
                await self.db.execute("DELETE FROM conversations WHERE user_id = ?", (user_id,))
                await self.db.execute("DELETE FROM memories WHERE user_id = ?", (user_id,))
                # The files' rows cascade to their passages and those to the passages' index.
                await self.db.execute("DELETE FROM files WHERE user_id = ?", (user_id,))
                cursor = await self.db.execute("DELETE FROM users WHERE user_id = ?", (user_id,))
                if cursor.rowcount == 0:
                    raise NotFound(f"no user {user_id!r}")
                await self.db.commit()
            except BaseException:
                await self.db.rollback()
                raise

    async def _update_user(self, sql: str, params: tuple[object, ...]) -> None:
        async with self._writing:
            try:
                cursor = await self.db.execute(sql, params)
                await self.db.commit()
            except sqlite3.IntegrityError as exc:
                await self.db.rollback()
                raise AlreadyExists("that token is already in use") from exc
        if cursor.rowcount == 0:
            raise NotFound(f"no user {params[-1]!r}")

    # Conversations -----------------------------------------------------------------------------

    async def get_conversation(self, user_id: str, conversation_id: str) -> ConversationRecord:
        row = await self._one(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
            "WHERE user_id = ? AND conversation_id = ?",
            (user_id, conversation_id),
        )
        if row is None:
            raise NotFound(f"no conversation {conversation_id!r}")
        return _conversation(row)

    async def list_conversations(
        self, user_id: str, limit: int, updated_before: float | None = None
    ) -> list[ConversationRecord]:
        before = updated_before if updated_before is not None else float("inf")
        rows = await self._all(
            f"SELECT {_CONVERSATION_COLUMNS} FROM conversations "
            "WHERE user_id = ? AND updated_at < ? ORDER BY updated_at DESC LIMIT ?",
            (user_id, before, limit),
        )
        return [_conversation(row) for row in rows]

    async def delete_conversation(self, user_id: str, conversation_id: str) -> None:
        async with self._writing:
            cursor = await self.db.execute(
                "DELETE FROM conversations WHERE user_id = ? AND conversation_id = ?",
                (user_id, conversation_id),
            )
            await self.db.commit()
        if cursor.rowcount == 0:
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
        async with self._writing:
            cursor = await self.db.execute(
                "UPDATE conversations SET summary = ?, summary_tokens = ?, summary_upto_seq = ?, "
                "pinned = ?, pinned_tokens = ? "
                "WHERE user_id = ? AND conversation_id = ? AND summary_upto_seq = ?",
                (summary, summary_tokens, upto_seq, pinned, pinned_tokens, user_id,
                 conversation_id, expected_upto_seq),
            )  # fmt: skip
            await self.db.commit()
        if cursor.rowcount == 0:
            await self.get_conversation(user_id, conversation_id)  # NotFound when not theirs
            return False
        return True

    async def get_message(self, user_id: str, message_id: str) -> MessageRecord:
        row = await self._one(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE user_id = ? AND message_id = ?",
            (user_id, message_id),
        )
        if row is None:
            raise NotFound(f"no message {message_id!r}")
        return _message(row)

    async def delete_response(self, user_id: str, response_id: str) -> None:
        """Marks the message response_id deleted as a response; NotFound for no such message
        or one already deleted."""
        message = await self.get_message(user_id, response_id)
        async with self._writing:
            cursor = await self.db.execute(
                "INSERT INTO deleted_responses (user_id, conversation_id, response_id, deleted_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (user_id, message.conversation_id, response_id, time.time()),
            )
            await self.db.commit()
        if cursor.rowcount == 0:
            raise NotFound(f"no response {response_id!r}")

    async def response_deleted(self, user_id: str, response_id: str) -> bool:
        row = await self._one(
            "SELECT 1 FROM deleted_responses WHERE user_id = ? AND response_id = ?",
            (user_id, response_id),
        )
        return row is not None

    async def list_messages(self, user_id: str, conversation_id: str) -> list[MessageRecord]:
        await self.get_conversation(user_id, conversation_id)
        rows = await self._all(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE user_id = ? AND conversation_id = ? ORDER BY seq",
            (user_id, conversation_id),
        )
        return [_message(row) for row in rows]

    async def newest_message(self, user_id: str, conversation_id: str) -> MessageRecord | None:
        row = await self._one(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages "
            "WHERE user_id = ? AND conversation_id = ? ORDER BY seq DESC LIMIT 1",
            (user_id, conversation_id),
        )
        return _message(row) if row else None

    async def add_message(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str = ""
    ) -> MessageRecord:
        """Appends a turn; the first turn of a new conversation id creates the conversation."""
        async with self._writing:
            return await self._append(user_id, conversation_id, message, title)

    async def _append(
        self, user_id: str, conversation_id: str, message: NewMessage, title: str
    ) -> MessageRecord:
        now = time.time()
        db = self.db
        try:
            await db.execute("BEGIN IMMEDIATE")
            counted = message.tokens + await self._recount_parent(user_id, conversation_id, message)
            # Creates the conversation with its first turn, or counts the turn into it.
            await db.execute(
                "INSERT INTO conversations (user_id, conversation_id, title, model, pool, "
                "total_tokens, created_at, updated_at, region) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (user_id, conversation_id) DO UPDATE SET "
                "updated_at = excluded.updated_at, "
                "total_tokens = total_tokens + excluded.total_tokens, "
                "model = CASE WHEN excluded.model != '' THEN excluded.model ELSE model END, "
                "pool = CASE WHEN excluded.pool != '' THEN excluded.pool ELSE pool END, "
                "region = CASE WHEN excluded.region != '' THEN excluded.region ELSE region END",
                (user_id, conversation_id, title, message.model, message.pool, counted,
                 now, now, message.region),
            )  # fmt: skip
            # The next seq is read in the insert itself: one statement, one trip to the thread.
            rows = await db.execute_fetchall(
                f"INSERT INTO messages (user_id, {_MESSAGE_COLUMNS}) "
                "SELECT ?, ?, coalesce(max(seq), 0) + 1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? "
                "FROM messages WHERE user_id = ? AND conversation_id = ? RETURNING seq",
                (
                    user_id,
                    conversation_id,
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
                    user_id,
                    conversation_id,
                ),
            )
            seq = int(next(iter(rows))[0])
            await db.commit()
        except sqlite3.IntegrityError as exc:
            await db.rollback()
            raise AlreadyExists(f"message {message.message_id!r} already exists") from exc
        except BaseException:
            await db.rollback()
            raise
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

    async def _recount_parent(self, user_id: str, conversation_id: str, message: NewMessage) -> int:
        """Stores the parent's exact count, if the answer brought one; what it changes in the
        conversation's total. Inside the append's transaction."""
        if not message.parent_tokens or message.parent_seq is None:
            return 0
        where = (user_id, conversation_id, message.parent_seq)
        rows = list(await self.db.execute_fetchall(
            "SELECT tokens FROM messages WHERE user_id = ? AND conversation_id = ? AND seq = ?",
            where,
        ))  # fmt: skip
        if not rows:
            return 0
        await self.db.execute(
            "UPDATE messages SET tokens = ? WHERE user_id = ? AND conversation_id = ? AND seq = ?",
            (message.parent_tokens, *where),
        )
        return message.parent_tokens - int(rows[0][0])

    async def record_serving(self, user_id: str, serving: ServingRecord) -> None:
        async with self._writing:
            try:
                await self.db.execute(
                    f"INSERT INTO message_serving (user_id, {_SERVING_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (user_id, serving.message_id, serving.conversation_id, serving.version,
                     serving.slice, serving.routed_pool, serving.budget, serving.served_pool,
                     time.time()),
                )  # fmt: skip
                await self.db.commit()
            except sqlite3.IntegrityError as exc:
                await self.db.rollback()
                raise NotFound(f"no message {serving.message_id!r} to record, or recorded") from exc

    async def serving_of(self, user_id: str, message_id: str) -> ServingRecord:
        row = await self._one(
            f"SELECT {_SERVING_COLUMNS} FROM message_serving WHERE user_id = ? AND message_id = ?",
            (user_id, message_id),
        )
        if row is None:
            raise NotFound(f"no serving record of message {message_id!r}")
        return ServingRecord(**dict(row))

    async def conversation_version(self, user_id: str, conversation_id: str) -> str:
        row = await self._one(
            "SELECT version FROM message_serving WHERE user_id = ? AND conversation_id = ? "
            "ORDER BY created_at LIMIT 1",
            (user_id, conversation_id),
        )
        return str(row["version"]) if row else ""

    async def rate_message(self, user_id: str, feedback: FeedbackRecord) -> str:
        now = time.time()
        async with self._writing:
            try:
                earlier = await self._one(
                    "SELECT rating FROM message_feedback WHERE user_id = ? AND message_id = ?",
                    (user_id, feedback.message_id),
                )
                await self.db.execute(
                    f"INSERT INTO message_feedback (user_id, {_FEEDBACK_COLUMNS}) "
                    f"VALUES (?, ?, ?, ?, ?, ?, ?, ?) {_FEEDBACK_UPDATE}",
                    (user_id, feedback.message_id, feedback.conversation_id, feedback.rating,
                     feedback.comment, feedback.version, now, now),
                )  # fmt: skip
                await self.db.commit()
            except sqlite3.IntegrityError as exc:
                await self.db.rollback()
                raise NotFound(f"no message {feedback.message_id!r} to rate") from exc
        return str(earlier["rating"]) if earlier else ""

    async def feedback_of(self, user_id: str, message_id: str) -> FeedbackRecord:
        row = await self._one(
            f"SELECT {_FEEDBACK_COLUMNS} FROM message_feedback "
            "WHERE user_id = ? AND message_id = ?",
            (user_id, message_id),
        )
        if row is None:
            raise NotFound(f"no rating of message {message_id!r}")
        return FeedbackRecord(**dict(row))

    async def capture_prompt(self, user_id: str, prompt: CapturedPrompt) -> None:
        async with self._writing:
            try:
                await self.db.execute(
                    f"INSERT INTO captured_prompts (user_id, {captured_prompts.COLUMNS}) "
                    f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) {captured_prompts.ON_CONFLICT}",
                    (user_id, *captured_prompts.row_values(prompt, time.time())),
                )
                await self.db.commit()
            except sqlite3.IntegrityError as exc:
                await self.db.rollback()
                raise NotFound(f"no message {prompt.message_id!r} to capture") from exc

    async def captured_prompt(self, user_id: str, message_id: str) -> CapturedPrompt:
        row = await self._one(
            f"SELECT {captured_prompts.COLUMNS} FROM captured_prompts "
            "WHERE user_id = ? AND message_id = ?",
            (user_id, message_id),
        )
        if row is None:
            raise NotFound(f"no captured prompt of message {message_id!r}")
        return captured_prompts.from_row(row)

    async def forget_prompts(self, captured_before: float) -> int:
        async with self._writing:
            cursor = await self.db.execute(
                "DELETE FROM captured_prompts WHERE created_at < ?", (captured_before,)
            )
            await self.db.commit()
        return cursor.rowcount
