"""Faults for tests and bench/faults.py to cause on a LocalPlatform mid-answer: which process
serves an answer, killing it, and waiting for the platform to be whole again; what the
schedulers and etcd say of the fleet and the ladder's lead."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import time
from collections.abc import Sequence

import aetcd
import aiohttp

from clients.admin_client import AdminClient
from clients.chatctl.platform import Child, LocalPlatform
from tests.servers import Etcd

STREAMING = re.compile(r"^gateway_answers_streaming ([0-9.]+)$", re.MULTILINE)
READY_TIMEOUT_S = 60.0
LEADER_KEY = b"/chat/v1/ladder/leader"


async def streaming_gateway(http: aiohttp.ClientSession, platform: LocalPlatform) -> Child:
    """The gateway generating the one answer in flight, as its metrics tell an operator."""
    while True:
        for child in platform.children:
            if child.name.startswith("gateway"):
                host = str(child.ready["grpc"]).rsplit(":", 1)[0]
                async with http.get(f"http://{host}:{child.ready['metrics']}/metrics") as r:
                    found = STREAMING.search(await r.text())
                if found and float(found.group(1)) == 1:
                    return child
        await asyncio.sleep(0.02)


def serving_node(platform: LocalPlatform, replica: str) -> Child:
    """The nodeagent of a replica named in an answer's `meta` (local-<pool>-<index>)."""
    return next(c for c in platform.children if c.name == f"nodeagent-{replica.rsplit('-', 1)[1]}")


async def kill(child: Child) -> None:
    child.process.send_signal(signal.SIGKILL)
    await child.process.wait()


async def restart_the_dead(platform: LocalPlatform, http: aiohttp.ClientSession) -> None:
    """Starts every killed service again; returns once the scheduler sees every node ready
    and the edge reaches every gateway (a restarted one may wait out a reconnect backoff)."""
    for child in list(platform.children):
        if child.process.returncode is not None:
            await platform.restart(child.name)
    deadline = time.monotonic() + READY_TIMEOUT_S
    nodes = platform.settings.nodes
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as admin:
        while (states := [n.state for n in await admin.nodes()]) != ["ready"] * nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the nodes are not all ready: {states}")
            await asyncio.sleep(0.05)
    while True:
        async with http.get(f"{platform.edge_url}/readyz") as response:
            gateways = (await response.json()).get("gateways", {})
        if all(state == "serving" for state in gateways.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the edge does not reach every gateway: {gateways}")
        await asyncio.sleep(0.05)


def child_of(platform: LocalPlatform, name: str) -> Child:
    return next(c for c in platform.children if c.name == name)


async def ready_nodes(platform: LocalPlatform) -> list[set[str]]:
    """The ready nodes each scheduler lists."""
    views = []
    for address in platform.scheduler_addresses():
        async with AdminClient(address, platform.admin_token, tls=platform.tls()) as admin:
            views.append({n.node_id for n in await admin.nodes() if n.state == "ready"})
    return views


async def leading(platform: LocalPlatform, schedulers: Sequence[str]) -> list[bool]:
    """Whether each scheduler named says it leads the ladder, in that order."""
    flags = []
    for name in schedulers:
        address = str(child_of(platform, name).ready["grpc"])
        async with AdminClient(address, platform.admin_token, tls=platform.tls()) as admin:
            flags.append((await admin.ladder()).leading)
    return flags


def scheduler_id(child: Child) -> str:
    """The id a scheduler holds the ladder's leader key with (scheduler.main: host and pid)."""
    return f"{socket.gethostname()}-{child.process.pid}"


async def etcd_revision(etcd: Etcd) -> int:
    """etcd's revision now, read with the leader key (held while any scheduler runs)."""
    async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
        found = await client.get(LEADER_KEY)
    assert found is not None, "no scheduler holds the leader key"
    return int(found.header.revision)


async def leader_history(etcd: Etcd, start: int) -> list[tuple[str, bytes | None]]:
    """Every put and delete of the ladder's leader key from revision `start` on, in order, up
    to its put now held: etcd's own record of who led."""
    async with aetcd.Client(host=etcd.host, port=etcd.port) as client:
        held = await client.get(LEADER_KEY)
        assert held is not None, "no scheduler holds the leader key"
        found: list[tuple[str, bytes | None]] = []
        watch = await client.watch(LEADER_KEY, start_revision=start)
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                async for event in watch:
                    put = event.kind == aetcd.EventKind.PUT
                    found.append(("put" if put else "delete", event.kv.value if put else None))
                    if event.kv.mod_revision >= held.mod_revision:
                        return found
        finally:
            await watch.cancel()
    raise AssertionError("etcd's watch ended before the leader key's last put")
