"""What only PostgreSQL has to prove: many connections and processes writing at once.

The behaviour both backends share is tested in test_stores.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from domain.errors import AlreadyExists, InvalidArgument, NotFound, Unavailable
from domain.types import Role, Tier
from store.migrations import load
from store.postgres import CALL_TIMEOUT_S, PostgresStore
from store.records import NewMessage
from tests.relay import SilentRelay
from tests.servers import Postgres


@contextlib.asynccontextmanager
async def fresh_database(server: Postgres) -> AsyncIterator[str]:
    """A database of its own for one test, dropped afterwards; yields its DSN."""
    name = f"test_{uuid.uuid4().hex}"
    admin = await asyncpg.connect(server.dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{server.dsn.rsplit('/', 1)[0]}/{name}"
        finally:
            # FORCE ends connections a failed test left open, so the drop cannot hang.
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
async def dsn(postgres_server: Postgres) -> AsyncIterator[str]:
    async with fresh_database(postgres_server) as url:
        yield url


@pytest.fixture
async def store(dsn: str) -> AsyncIterator[PostgresStore]:
    s = PostgresStore(dsn, max_size=5)
    await s.open()
    yield s
    await s.close()


def msg(mid: str, tokens: int = 1) -> NewMessage:
    return NewMessage(mid, Role.USER, f"text of {mid}", tokens, None, model="m")


async def test_concurrent_turns_on_one_conversation_get_consecutive_seqs(store) -> None:
    # More writers than pooled connections, on a conversation that does not exist yet.
    added = await asyncio.gather(
        *(store.add_message("alice", "c1", msg(f"m{i}", i)) for i in range(20))
    )
    assert sorted(m.seq for m in added) == list(range(1, 21))
    stored = await store.list_messages("alice", "c1")
    assert [m.seq for m in stored] == list(range(1, 21))
    assert {m.message_id: m.seq for m in stored} == {m.message_id: m.seq for m in added}
    assert (await store.get_conversation("alice", "c1")).total_tokens == sum(range(20))


async def test_two_processes_writing_one_conversation_share_one_seq_order(dsn) -> None:
    stores = [PostgresStore(dsn, max_size=3) for _ in range(2)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        added = await asyncio.gather(
            *(stores[i % 2].add_message("alice", "c1", msg(f"m{i}")) for i in range(20))
        )
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    assert sorted(m.seq for m in added) == list(range(1, 21))


async def test_a_message_id_reused_at_once_is_stored_once(store) -> None:
    results = await asyncio.gather(
        *(store.add_message("alice", f"c{i}", msg("m1")) for i in range(10)),
        return_exceptions=True,
    )
    assert sum(isinstance(r, AlreadyExists) for r in results) == 9
    (winner,) = [r for r in results if not isinstance(r, BaseException)]
    assert winner.seq == 1
    # The losers' conversations were rolled back with their message.
    listed = await store.list_conversations("alice", 100)
    assert [c.conversation_id for c in listed] == [winner.conversation_id]


async def test_processes_starting_at_once_migrate_once(dsn) -> None:
    stores = [PostgresStore(dsn) for _ in range(4)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        shipped = [migration.version for migration in load("postgres")]
        assert [await s.schema_version() for s in stores] == [shipped[-1]] * 4
        rows = await stores[0].pool.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        assert [r["version"] for r in rows] == shipped
    finally:
        await asyncio.gather(*(s.close() for s in stores))


async def test_a_delete_racing_a_turn_leaves_no_orphan(store) -> None:
    await store.add_message("alice", "c1", msg("m0"))
    outcomes = await asyncio.gather(
        *(store.add_message("alice", "c1", msg(f"m{i}")) for i in range(1, 6)),
        store.delete_conversation("alice", "c1"),
        return_exceptions=True,
    )
    assert not any(isinstance(o, BaseException) for o in outcomes)
    # Whatever ran after the delete started the conversation again from seq 1.
    try:
        seqs = [m.seq for m in await store.list_messages("alice", "c1")]
    except NotFound:
        seqs = []
    assert seqs == list(range(1, len(seqs) + 1))
    count = await store.pool.fetchval("SELECT count(*) FROM messages")
    assert count == len(seqs)


async def test_nul_characters_are_refused_clearly_and_store_nothing(store) -> None:
    bad = NewMessage("m1", Role.USER, "a\x00b", 1, None)
    with pytest.raises(InvalidArgument, match="NUL"):
        await store.add_message("alice", "c1", bad)
    with pytest.raises(NotFound):
        await store.get_conversation("alice", "c1")


async def test_a_closed_store_says_so(dsn) -> None:
    s = PostgresStore(dsn)
    with pytest.raises(RuntimeError, match="not open"):
        await s.schema_version()
    await s.open()
    await s.close()
    await s.close()
    with pytest.raises(RuntimeError, match="not open"):
        await s.get_user("u1")


async def test_a_database_behind_a_silent_link_fails_calls_as_unavailable_in_time(
    dsn: str,
) -> None:
    """A partition sends no RST: without a bound, a call waited for TCP's retries (minutes)."""
    port = int(dsn.rsplit(":", 1)[1].split("/", 1)[0])
    relay = SilentRelay("127.0.0.1", port)
    await relay.start()
    store = PostgresStore(dsn.replace(f"127.0.0.1:{port}", relay.address), max_size=2)
    await store.open()
    try:
        await store.create_user("alice", Tier.FREE, "hash-a")
        relay.freeze()
        loop = asyncio.get_running_loop()
        for call in (lambda: store.user_by_token_hash("hash-a"),
                     lambda: store.add_message("alice", "c1", msg("m1"))):  # fmt: skip
            began = loop.time()
            with pytest.raises(Unavailable):
                await call()
            assert loop.time() - began < CALL_TIMEOUT_S + 1.0
        relay.thaw()
        # Back: nothing of the refused turn was stored.
        with pytest.raises(NotFound):
            await store.list_messages("alice", "c1")
    finally:
        relay.thaw()
        await store.close()
        await relay.close()
