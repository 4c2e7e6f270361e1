"""The migration runner's rule for rollbacks, on both backends: a release serves on a schema
a newer release expanded, refuses one a newer release contracted past what it knows, and
upgrades a schema table from before the rule."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import asyncpg
import pytest

from store.factory import open_store
from store.migrations import IncompatibleSchema, load, parse, pending
from tests.store.test_stores import url  # noqa: F401 (the fixture: both backends)

SHIPPED = [1, 2, 4, 5, 6, 7, 8, 9, 10, 11]


async def execute(store_url: str, sql: str) -> None:
    """A statement run as another release would, outside the store under test."""
    if store_url.startswith("sqlite:///"):
        with sqlite3.connect(store_url.removeprefix("sqlite:///")) as db:
            db.executescript(sql)
        return
    conn = await asyncpg.connect(store_url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


async def applied_by_newer_release(store_url: str, version: int, code_floor: int) -> None:
    store = await open_store(store_url)
    await store.close()
    await execute(store_url, "INSERT INTO schema_migrations (version, applied_at, code_floor) "
                             f"VALUES ({version}, {time.time()}, {code_floor})")  # fmt: skip


def test_every_shipped_migration_is_an_expansion_on_both_backends() -> None:
    for backend in ("sqlite", "postgres"):
        found = [(m.version, m.code_floor) for m in load(backend)]
        assert found == [(v, 0) for v in SHIPPED], backend


def test_a_migration_must_say_its_kind() -> None:
    with pytest.raises(ValueError) as caught:
        parse("008_x.sql", "ALTER TABLE t DROP COLUMN c;")
    assert str(caught.value) == (
        "008_x.sql: the first line must be `-- kind: expand` or `-- kind: contract, needs NNN`"
    )
    assert parse("009_y.sql", "-- kind: contract, needs 8\nDROP TABLE t;").code_floor == 8
    with pytest.raises(ValueError) as caught:
        parse("009_y.sql", "-- kind: contract, needs 9\nDROP TABLE t;")
    assert str(caught.value) == "009_y.sql: a contraction needs a migration before its own"


def test_pending_lets_a_release_run_on_expansions_and_floors_it_knows() -> None:
    known = load("sqlite")
    assert pending(known, {1: 0, 2: 0}) == known[2:]
    # 12 and 13 are a newer release's: an expansion, then a contraction needing 11 (known here).
    assert pending(known, {v: 0 for v in SHIPPED} | {12: 0, 13: 11}) == []


async def test_a_release_serves_on_a_newer_releases_expansion(url: str) -> None:  # noqa: F811
    await applied_by_newer_release(url, 12, 0)
    store = await open_store(url)
    try:
        assert await store.schema_version() == 12
        assert [user.user_id for user in await store.list_users()] == []
    finally:
        await store.close()


async def test_a_release_refuses_a_schema_contracted_past_what_it_knows(url: str) -> None:  # noqa: F811
    await applied_by_newer_release(url, 12, 0)
    await applied_by_newer_release(url, 13, 12)
    with pytest.raises(IncompatibleSchema) as caught:
        await open_store(url)
    assert str(caught.value) == (
        "the database's schema was contracted by migration 13 of a newer release: it needs a "
        "release that knows migration 12 or later, and this one knows up to 11. Run a newer "
        "release (docs/runbook.md, 'Rolling back a release')"
    )


async def test_a_schema_table_from_before_the_rule_is_upgraded(url: str) -> None:  # noqa: F811
    real = "DOUBLE PRECISION" if url.startswith("postgres") else "REAL"
    await execute(url, "CREATE TABLE schema_migrations "
                       f"(version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)")  # fmt: skip
    store = await open_store(url)
    await store.close()
    await applied_by_newer_release(url, 13, 12)
    with pytest.raises(IncompatibleSchema):
        await open_store(url)


async def test_a_store_that_refuses_the_schema_leaves_no_thread_behind(tmp_path: Path) -> None:
    """SQLite's connection has a thread of its own, not a daemon: had the refused store kept
    it, the process that tried to open it could never exit."""
    sqlite_url = f"sqlite:///{tmp_path / 'chat.db'}"
    await applied_by_newer_release(sqlite_url, 12, 0)
    await applied_by_newer_release(sqlite_url, 13, 12)
    before = set(threading.enumerate())
    with pytest.raises(IncompatibleSchema):
        await open_store(sqlite_url)
    started = [t for t in threading.enumerate() if t not in before and not t.daemon]
    for thread in started:
        await asyncio.to_thread(thread.join, 10)
    assert [t.name for t in started if t.is_alive()] == []


async def test_a_store_opened_while_another_process_converts_a_new_file_waits_for_it(
    tmp_path: Path,
) -> None:
    """Two services starting on one new SQLite file: the first takes the file whole to make it
    WAL, and SQLite tells the second "locked" at once rather than waiting (its busy wait does
    not cover the change of mode). Here another connection holds the new file for a moment,
    as the first service's change does; the store opens once it lets go."""
    path = tmp_path / "chat.db"
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE first_service_was_here (x)")
    loop = asyncio.get_running_loop()
    loop.call_later(0.3, holder.execute, "COMMIT")
    try:
        store = await open_store(f"sqlite:///{path}")
    finally:
        holder.close()
    try:
        assert await store.schema_version() == SHIPPED[-1]
    finally:
        await store.close()
