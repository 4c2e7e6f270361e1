"""Several edge processes on one port (SO_REUSEPORT): `chatctl up --edge-workers 2`. Each
worker listens on the port itself, connections spread across them, every answer is whole,
and a worker that dies is replaced while the other goes on serving."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path

import aiohttp
import pytest

from clients.chatctl.platform import LocalPlatform, PlatformError, PlatformSettings
from tests.simtext import expected_answer
from tests.sse import read_events

pytestmark = pytest.mark.slow

SYSTEM_PROMPT = "You are a helpful assistant."
ANSWER_TOKENS = (30, 40)
LISTEN, ESTABLISHED = "0A", "01"


@pytest.fixture(scope="module")
async def workers_platform(tmp_path_factory):
    platform = LocalPlatform(
        PlatformSettings(
            state_dir=tmp_path_factory.mktemp("edge-workers"),
            edge_listen="127.0.0.1:0",
            edge_workers=2,
            nodes=1,
            extra_env={
                "CHAT_NODEAGENT_ENGINE": "sim",
                "CHAT_NODEAGENT_SIM_SPEED": "2",
                "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
                "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
                "CHAT_GATEWAY_ROUTER": "false",
                "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "1000",
                "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
            },
        )
    )
    try:
        await platform.start()
        yield platform
    finally:
        await platform.stop()


def edge_child(platform: LocalPlatform):
    return next(child for child in platform.children if child.name == "edge")


def edge_port(platform: LocalPlatform) -> int:
    return int(platform.edge_url.rsplit(":", 1)[1])


def sockets_of(pid: int) -> set[str]:
    """The socket inodes a process holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def port_sockets(port: int, state: str) -> set[str]:
    """Inodes of this host's TCP sockets on local `port` in `state` (the kernel's own table)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port and fields[3] == state:
            found.add(fields[9])
    return found


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found.update(int(child) for child in text)
    return found


async def stopped_listening(listeners: set[str], port: int) -> None:
    """Until none of these sockets listens on the port any more."""
    while True:
        if not listeners & port_sockets(port, LISTEN):
            return
        await asyncio.sleep(0.01)


async def ask(http: aiohttp.ClientSession, platform: LocalPlatform, content: str) -> str:
    headers = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    async with http.post(
        f"{platform.edge_url}/v1/conversations/w{uuid.uuid4().hex[:10]}/messages",
        json={"content": content},
        headers=headers,
    ) as response:
        assert response.status == 200, await response.text()
        events = await read_events(response)
    assert events[-1].event == "done", events[-1]
    return "".join(e.data["text"] for e in events if e.event == "delta")


async def test_every_worker_listens_and_streams_spread_across_them(workers_platform) -> None:
    platform = workers_platform
    port = edge_port(platform)
    pids = edge_child(platform).ready["workers"]
    assert len(pids) == 2
    listening = port_sockets(port, LISTEN)
    for pid in pids:
        assert sockets_of(pid) & listening, f"worker {pid} does not listen on {port}"

    # One connection a stream; while they are open, each worker holds some of them. The
    # kernel hashes each connection to a worker: all 24 on one worker is a 2**-23 chance.
    contents = [f"Spread question {i}: tell me about comets." for i in range(24)]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as http:
        asking = [asyncio.create_task(ask(http, platform, c)) for c in contents]
        served = {pid: 0 for pid in pids}
        while not all(served.values()) and not all(task.done() for task in asking):
            established = port_sockets(port, ESTABLISHED)
            for pid in pids:
                served[pid] = max(served[pid], len(sockets_of(pid) & established))
            await asyncio.sleep(0.02)
        texts = await asyncio.gather(*asking)
    assert texts == [expected_answer(c, SYSTEM_PROMPT, ANSWER_TOKENS) for c in contents]
    assert all(served.values()), f"connections held per worker: {served}"


async def test_a_dead_worker_is_replaced_and_the_other_serves_meanwhile(workers_platform) -> None:
    platform = workers_platform
    port = edge_port(platform)
    supervisor = edge_child(platform).process.pid
    before = children_of(supervisor)
    assert len(before) == 2
    victim = min(before)
    listeners = sockets_of(victim) & port_sockets(port, LISTEN)
    assert listeners
    os.kill(victim, signal.SIGKILL)
    # The kill lands asynchronously: a connection the kernel hands the dying worker's listener
    # before it closes is reset (as with any SO_REUSEPORT server). Ask once it closed. Not
    # once the worker is a zombie: its main thread is one while its other threads still exit
    # and hold its sockets open.
    await asyncio.wait_for(stopped_listening(listeners, port), 30)
    contents = [f"After the kill {i}: tell me about tides." for i in range(6)]
    async with aiohttp.ClientSession() as http:
        texts = [await ask(http, platform, content) for content in contents]
    assert texts == [expected_answer(c, SYSTEM_PROMPT, ANSWER_TOKENS) for c in contents]

    async def replaced() -> set[int]:
        while True:
            now = children_of(supervisor)
            fresh = now - before
            if len(now) == 2 and fresh and all(sockets_of(p) & port_sockets(port, LISTEN)
                                               for p in fresh):  # fmt: skip
                return fresh
            await asyncio.sleep(0.05)

    fresh = await asyncio.wait_for(replaced(), 60)
    assert victim not in children_of(supervisor) and len(fresh) == 1


def test_no_edge_workers_is_refused() -> None:
    with pytest.raises(PlatformError, match="edge-workers must be at least 1"):
        PlatformSettings(edge_workers=0)
