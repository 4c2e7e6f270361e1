"""A release rolled back over a schema the newer release migrated: the platform of the commit
before the newest migration was added (from git history) runs against a PostgreSQL database
migrated by this code, serves a message, and this code reads it back."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import AsyncIterator
from io import BytesIO
from pathlib import Path

import pytest

from clients.chat_client import ChatClient, Delta, Done, Meta
from domain.errors import NotFound
from store.migrations import load
from store.postgres import PostgresStore
from store.records import CapturedPrompt, FilePassage, FileRecord
from tests.servers import Postgres
from tests.store.test_postgres import fresh_database

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
# What the services import, and the data they read.
TREES = ["clients", "domain", "edge", "gateway", "infra", "nodeagent", "scheduler", "store",
         "gen", "data"]  # fmt: skip
# The previous release's own LocalPlatform, with its own code: the children it spawns inherit
# its working directory and PYTHONPATH. It says where its gateway is, then runs until its
# stdin closes.
DRIVER = """
import asyncio, json, sys
from pathlib import Path
from clients.chatctl.platform import LocalPlatform, PlatformSettings

async def main():
    platform = LocalPlatform(PlatformSettings(
        state_dir=Path(sys.argv[1]), edge_listen="127.0.0.1:0", store_url=sys.argv[2],
        insecure=True, extra_env={"CHAT_NODEAGENT_ENGINE": "sim",
        "CHAT_NODEAGENT_SIM_SPEED": "20", "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "3,5"}))
    try:
        await platform.start()
        print(json.dumps({"gateway": platform.gateway_address, "tokens": platform.tokens}),
              flush=True)
        await asyncio.to_thread(sys.stdin.read)
    finally:
        await platform.stop()

asyncio.run(main())
"""


def git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def previous_release(into: Path) -> int:
    """The tree of the commit before the one that added the newest migration, unpacked; the
    newest migration's version."""
    newest = max(load("postgres"), key=lambda m: m.version).version
    folder = ROOT / "store" / "migrations" / "postgres"
    (path,) = [str(p.relative_to(ROOT)) for p in folder.glob(f"{newest:03d}_*.sql")]
    try:
        added = git("log", "--diff-filter=A", "--format=%H", "--", path).split()
        # A newest migration no commit has added yet (a change being made) comes after HEAD,
        # which is then the release before it.
        archive = git("archive", f"{added[-1].decode()}^" if added else "HEAD", *TREES)
    except subprocess.CalledProcessError as error:
        pytest.skip(f"no git history to take the previous release from: {error.stderr!r}")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return newest


async def captured_while_running(dsn: str, message_id: str) -> CapturedPrompt:
    """The turn's capture, once the serving gateway wrote it (after the answer's end)."""
    store = PostgresStore(dsn)
    await store.open()
    try:
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            try:
                return await store.captured_prompt("dev-free", message_id)
            except NotFound:
                if asyncio.get_running_loop().time() > deadline:
                    raise
            await asyncio.sleep(0.05)
    finally:
        await store.close()


# A file this code kept before the rollback (the newest migration brought users' files).
FILE_PASSAGES = ["Our cat is called Tofu.", "Tofu"]
FILE_CONTENT = "\n\n".join(FILE_PASSAGES)
FILE = FileRecord("file-" + "0" * 24, "notes.txt", "user_data", len(FILE_CONTENT.encode()),
                  len(FILE_PASSAGES), 1_000_000.0)  # fmt: skip


@pytest.fixture
async def migrated(postgres_server: Postgres) -> AsyncIterator[str]:
    async with fresh_database(postgres_server) as dsn:
        store = PostgresStore(dsn)
        await store.open()
        try:
            await store.add_file("dev-free", FILE, FILE_CONTENT, FILE_PASSAGES)
        finally:
            await store.close()
        yield dsn


async def test_the_previous_release_serves_on_the_schema_this_one_migrated(
    migrated: str, tmp_path: Path
) -> None:
    old = tmp_path / "release"
    newest = previous_release(old)
    state = tmp_path / "state"
    state.mkdir()
    env = {**os.environ, "PYTHONPATH": f"{old}:{old / 'gen'}"}
    driver = await asyncio.create_subprocess_exec(
        sys.executable, "-c", DRIVER, str(state), migrated, cwd=old, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert driver.stdin is not None and driver.stdout is not None
    try:
        line = await asyncio.wait_for(driver.stdout.readline(), 60)
        assert line, "the previous release's platform did not start; see its logs in " + str(state)
        started = json.loads(line)
        conversation = f"c_{uuid.uuid4().hex[:8]}"
        async with ChatClient(started["gateway"], started["tokens"]["free"]) as chat:
            events = [e async for e in chat.send(conversation, "Hello from before.")]
        # The release before captures the turn as this one does: the turn offered no tools.
        kept = await captured_while_running(migrated, events[0].message_id)
    finally:
        driver.stdin.close()
        await asyncio.wait_for(driver.wait(), 30)
    assert isinstance(events[0], Meta)
    assert isinstance(events[-1], Done) and events[-1].finish == "stop"
    answer = "".join(e.text for e in events if isinstance(e, Delta))
    store = PostgresStore(migrated)
    await store.open()
    try:
        stored = await store.list_messages("dev-free", conversation)
        assert await store.schema_version() == newest
        # The release before knows nothing of files: the user's file is as this code kept it.
        assert await store.list_files("dev-free") == [FILE]
        assert await store.search_passages("dev-free", ["cats"], 5) == [
            FilePassage(FILE.file_id, "notes.txt", 0, FILE_PASSAGES[0])
        ]
    finally:
        await store.close()
    assert [(m.role.value, m.content) for m in stored] == [
        ("user", "Hello from before."),
        ("assistant", answer),
    ]
    assert [(t.role.value, t.text) for t in kept.turns][-1:] == [("user", "Hello from before.")]
    assert kept.tools == ()
