"""Faults for tests and bench/faults.py to cause on a LocalPlatform mid-answer: which process
serves an answer, killing it, and waiting for the platform to be whole again."""

from __future__ import annotations

import asyncio
import re
import signal
import time

import aiohttp

from clients.chat_client import AdminClient
from clients.chatctl.platform import Child, LocalPlatform

STREAMING = re.compile(r"^gateway_answers_streaming ([0-9.]+)$", re.MULTILINE)
READY_TIMEOUT_S = 60.0


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
