"""chatctl as operators run it: a subprocess per command, against the real local platform."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 120


@dataclass
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def clean_env(**extra: str) -> dict[str, str]:
    """The test's environment without any CHAT_* a developer may have set, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHAT_")}
    return {**env, **extra}


async def start(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "clients.chatctl.main",
        *args,
        cwd=ROOT,
        env=env or clean_env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def chatctl(*args: str, env: dict[str, str] | None = None, stdin: str = "") -> Run:
    process = await start(*args, env=env)
    assert process.stdin and process.stdout and process.stderr
    # Read as it comes, so that a command that runs past its bound still shows what it wrote.
    out, err = bytearray(), bytearray()

    async def drain(stream: asyncio.StreamReader, into: bytearray) -> None:
        while chunk := await stream.read(65536):
            into += chunk

    process.stdin.write(stdin.encode())
    process.stdin.close()
    try:
        await asyncio.wait_for(
            asyncio.gather(drain(process.stdout, out), drain(process.stderr, err), process.wait()),
            COMMAND_TIMEOUT_S,
        )
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(
            f"chatctl {' '.join(args)} ran past {COMMAND_TIMEOUT_S} s; it wrote:\n"
            f"{out.decode(errors='replace')}\n{err.decode(errors='replace')}"
        ) from None
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


def tls_dir(platform: LocalPlatform) -> str:
    return str(platform.tls_dir or "")


def admin_flags(platform: LocalPlatform) -> list[str]:
    return ["--scheduler", platform.scheduler_address, "--admin-token", platform.admin_token,
            "--tls-dir", tls_dir(platform)]  # fmt: skip


def user_env(platform: LocalPlatform, tier: str = "free") -> dict[str, str]:
    return clean_env(
        CHAT_GATEWAY=platform.gateway_address,
        CHAT_TOKEN=platform.tokens[tier],
        CHAT_TLS_DIR=tls_dir(platform),
    )


@pytest.fixture
async def admin(platform: LocalPlatform) -> AsyncIterator[AdminClient]:
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as scheduler:
        yield scheduler


async def wait_for_state(admin: AdminClient, node_id: str, state: str) -> None:
    deadline = time.monotonic() + 10
    while (node := {n.node_id: n for n in await admin.nodes()}[node_id]).state != state:
        assert time.monotonic() < deadline, f"{node_id} is {node.state}, not {state}"
        await asyncio.sleep(0.1)


# The fleet --------------------------------------------------------------------------------------


async def test_nodes_lists_the_node_as_a_table_and_as_json(platform: LocalPlatform) -> None:
    text = await chatctl("nodes", *admin_flags(platform))
    assert text.code == 0, text.err
    header, row = text.out.splitlines()
    assert header.split()[:4] == ["NODE", "MODEL", "POOL", "STATE"]
    assert row.split()[:4] == ["local-small-0", "smollm2-135m-instruct", "small", "ready"]

    as_json = await chatctl("nodes", "--json", *admin_flags(platform))
    (node,) = as_json.json()
    assert node["node_id"] == "local-small-0" and node["state"] == "ready"
    assert node["free_kv_tokens"] > 0 and "queued_prefill_tokens" in node


async def test_nodes_json_gives_a_recent_report_age(platform: LocalPlatform) -> None:
    # The scheduler stamps reports with wall-clock time; a monotonic stamp (a 1970 date) made
    # the age null.
    run = await chatctl("nodes", "--json", *admin_flags(platform))
    assert run.code == 0, run.err
    (node,) = run.json()
    age = node["last_report_age_s"]
    assert isinstance(age, int | float) and not isinstance(age, bool), age
    assert 0 <= age < 5


async def test_addresses_come_from_env_or_from_the_state_dir(platform: LocalPlatform) -> None:
    env = clean_env(
        CHAT_SCHEDULER=platform.scheduler_address,
        CHAT_ADMIN_TOKEN=platform.admin_token,
        CHAT_TLS_DIR=tls_dir(platform),
    )
    by_env = await chatctl("nodes", "--json", env=env)
    # The platform fixture's state dir holds the platform.json and admin-token `up` writes.
    by_files = await chatctl("nodes", "--json", "--state-dir", str(platform.settings.state_dir))
    for run in (by_env, by_files):
        assert run.code == 0, run.err
        assert [n["node_id"] for n in run.json()] == ["local-small-0"]


async def test_nodes_watch_refreshes_until_ctrl_c(platform: LocalPlatform) -> None:
    process = await start("nodes", "--json", "--watch", "0.2", *admin_flags(platform))
    assert process.stdout is not None
    refreshes = [json.loads(await process.stdout.readline()) for _ in range(2)]
    process.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT_S)
    assert process.returncode == 0, err
    assert all(r[0]["node_id"] == "local-small-0" for r in refreshes)


async def test_drain_then_undrain_round_trip(platform: LocalPlatform, admin: AdminClient) -> None:
    try:
        drained = await chatctl("drain", "local-small-0", *admin_flags(platform))
        assert drained.code == 0 and "draining" in drained.out
        await wait_for_state(admin, "local-small-0", "draining")
        listed = await chatctl("nodes", "--json", *admin_flags(platform))
        assert listed.json()[0]["state"] == "draining"
    finally:
        undrained = await chatctl("undrain", "local-small-0", "--json", *admin_flags(platform))
        # Later tests need the node: wait until it takes answers again.
        await wait_for_state(admin, "local-small-0", "ready")
    assert undrained.code == 0
    assert undrained.json() == {"node_id": "local-small-0", "draining": False}


async def test_an_unknown_node_fails_with_a_reason(platform: LocalPlatform) -> None:
    run = await chatctl("drain", "no-such-node", *admin_flags(platform))
    assert run.code == 1 and run.out == ""
    assert run.err.startswith("chatctl: ") and "no-such-node" in run.err and "NOT_FOUND" in run.err


async def test_ladder_pin_then_unpin(platform: LocalPlatform) -> None:
    try:
        pinned = await chatctl("ladder", "--pin", "1", "--json", *admin_flags(platform))
        assert pinned.code == 0, pinned.err
        assert pinned.json()["rung"] == 1 and pinned.json()["pinned"] is True
        shown = await chatctl("ladder", *admin_flags(platform))
        assert "rung        1 (pinned)" in shown.out and "pinned at 1" in shown.out
    finally:
        unpinned = await chatctl("ladder", "--unpin", "--json", *admin_flags(platform))
    assert unpinned.code == 0 and unpinned.json()["pinned"] is False
    assert unpinned.json()["history"][-1]["reason"].startswith("unpinned")


# Users ------------------------------------------------------------------------------------------


async def test_users_create_list_tier_rotate_revoke(platform: LocalPlatform) -> None:
    user_id = f"ctl-{uuid.uuid4().hex[:8]}"
    flags = admin_flags(platform)
    created = await chatctl("users", "create", user_id, "--tier", "plus", "--json", *flags)
    assert created.code == 0, created.err
    assert created.json()["user"]["tier"] == "plus" and created.json()["token"].startswith("u_")

    listed = await chatctl("users", "list", *flags)
    # No regions: no home, not pinned.
    rows = [line.split()[:5] for line in listed.out.splitlines()]
    assert [user_id, "plus", "yes", "-", "no"] in rows

    moved = await chatctl("users", "tier", user_id, "free", *flags)
    assert moved.code == 0 and f"user {user_id} is now free" in moved.out

    rotated = await chatctl("users", "rotate", user_id, "--json", *flags)
    token = rotated.json()["token"]
    assert token != created.json()["token"]
    gateway = ["--gateway", platform.gateway_address, "--tls-dir", tls_dir(platform)]
    limits = await chatctl("limits", "--json", "--token", token, *gateway)
    assert limits.code == 0 and limits.json()["tier"] == "free"

    revoked = await chatctl("users", "revoke", user_id, *flags)
    assert revoked.code == 0
    refused = await chatctl("limits", "--token", token, *gateway)
    assert refused.code == 1 and "UNAUTHENTICATED" in refused.err
    listed = await chatctl("users", "list", "--json", *flags)
    assert {u["user_id"]: u["has_token"] for u in listed.json()}[user_id] is False


async def test_bad_input_is_a_usage_error(platform: LocalPlatform) -> None:
    flags = admin_flags(platform)
    for args in (
        ("users", "tier", "dev-free", "gold", *flags),
        ("users", "create", "x", "--tier", "gold", *flags),
        ("ladder", "--pin", "9", *flags),
        ("ladder", "--pin", "1", "--unpin", *flags),
        ("nodes", "--watch", "-1", *flags),
        ("up", "--gateways", "2"),  # several gateways share runs through Redis
        ("up", "--gateways", "0"),
        ("users",),
        ("no-such-command",),
        (),
    ):
        run = await chatctl(*args)
        assert run.code == 2, (args, run.err)
        assert "usage:" in run.err


async def test_no_address_anywhere_says_where_to_put_one(tmp_path: Path) -> None:
    run = await chatctl("nodes", "--state-dir", str(tmp_path))
    assert run.code == 1
    assert run.err.startswith("chatctl: no scheduler address") and "CHAT_SCHEDULER" in run.err


# A user's commands ------------------------------------------------------------------------------


async def test_limits_shows_the_bucket(platform: LocalPlatform) -> None:
    text = await chatctl("limits", env=user_env(platform))
    assert text.code == 0, text.err
    assert "tier     free" in text.out and "of 25,000 tokens" in text.out
    bucket = (await chatctl("limits", "--json", env=user_env(platform, "plus"))).json()
    assert bucket["tier"] == "plus" and bucket["capacity"] == 250_000
    assert bucket["full_in_seconds"] >= 0


async def test_chat_through_stdin_then_conversations(platform: LocalPlatform) -> None:
    conversation = f"c_ctl_{uuid.uuid4().hex[:8]}"
    state = str(platform.settings.state_dir)
    run = await chatctl(
        "chat", "--user", "free", "--state-dir", state, "--conversation", conversation,
        stdin="Say hello in five words.\n",
    )  # fmt: skip
    assert run.code == 0, run.err
    assert run.out.strip()  # the streamed answer
    assert conversation in run.err
    assert "[stop;" in run.err or "[length;" in run.err

    listed = await chatctl("conversations", "--json", env=user_env(platform))
    assert listed.code == 0
    mine = [c for c in listed.json() if c["conversation_id"] == conversation]
    assert mine and mine[0]["title"] and mine[0]["total_tokens"] > 0
    table = await chatctl("conversations", env=user_env(platform))
    assert table.out.splitlines()[0].split()[:2] == ["CONVERSATION", "TITLE"]
    assert conversation in table.out


async def test_chat_json_and_ctrl_c_stops_the_answer(platform: LocalPlatform) -> None:
    process = await start("chat", "--json", env=user_env(platform, "plus"))
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"Write a very long story about the sea, in many chapters.\n")
    await process.stdin.drain()
    events = [json.loads(await process.stdout.readline())]
    while events[-1]["event"] != "delta":
        events.append(json.loads(await process.stdout.readline()))
    process.send_signal(signal.SIGINT)
    while events[-1]["event"] not in ("done", "error"):
        events.append(json.loads(await asyncio.wait_for(process.stdout.readline(), 60)))
    process.stdin.close()
    _, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT_S)
    assert process.returncode == 0, err
    assert events[0]["event"] == "meta"
    assert [e["event_id"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1] == {**events[-1], "event": "done", "finish": "cancelled"}


async def test_ctrl_c_at_the_prompt_exits(platform: LocalPlatform) -> None:
    process = await start("chat", env=user_env(platform))
    assert process.stderr is not None
    banner = await asyncio.wait_for(process.stderr.readline(), COMMAND_TIMEOUT_S)
    assert b"Ctrl-C stops an answer" in banner  # the handler is in place by now
    process.send_signal(signal.SIGINT)
    out, _ = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT_S)
    assert process.returncode == 0 and out == b""


async def test_a_bad_token_fails_with_exit_1(platform: LocalPlatform) -> None:
    run = await chatctl("conversations", "--token", "u_bad", env=user_env(platform))
    assert run.code == 1 and run.err.startswith("chatctl: ") and "UNAUTHENTICATED" in run.err


async def test_plan_is_wired_in() -> None:
    run = await chatctl("plan", "--help")
    assert run.code == 0 and "plan" in run.out


# up --background / down -------------------------------------------------------------------------


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


async def test_up_in_the_background_then_down(tmp_path: Path) -> None:
    state = tmp_path / "state"
    flags = ["--state-dir", str(state)]
    started = await chatctl("up", "--background", "--listen", "127.0.0.1:0", "--json", *flags)
    assert started.code == 0, started.err + (state / "chatctl.log").read_text()
    summary = started.json()
    pid = summary["pid"]
    try:
        assert (state / "chatctl.pid").read_text().strip() == str(pid)
        addresses = json.loads((state / "platform.json").read_text())
        assert addresses["edge"] == summary["edge"] and addresses["edge"].startswith("http://")
        assert (state / "admin-token").stat().st_mode & 0o777 == 0o600
        listed = await chatctl("nodes", "--json", *flags)  # every address from the state dir
        assert [n["node_id"] for n in listed.json()] == ["local-small-0"]
        again = await chatctl("up", "--background", "--listen", "127.0.0.1:0", *flags)
        assert again.code == 1 and f"pid {pid}" in again.err

        stopped = await chatctl("down", "--json", *flags)
        assert stopped.code == 0, stopped.err
        assert stopped.json()["pid"] == pid and not alive(pid)
        assert not (state / "platform.json").exists() and not (state / "chatctl.pid").exists()
        twice = await chatctl("down", *flags)
        assert twice.code == 1 and "no platform is running" in twice.err
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)
