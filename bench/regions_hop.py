"""The one extra hop of regions, in time to first text: a user at home against a user who
reached another region's edge (passed on to home) and a conversation spilled away from home
(passed on by home, its history read from and its turns written to home over HomeService).

Then region b is SIGKILLed whole: how long until a's gateway counts it out, and until a user
homed at b is answered at a.

Two regions on this machine (loopback, mutual TLS, simulated replicas fast enough that the
platform's own work shows), the global directory in an etcd of its own. Sequential messages,
each a new conversation's first (the spilled ones: a later turn too, which reads history).

    python -m bench.regions_hop [--messages 30]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from tempfile import TemporaryDirectory

import aiohttp

from bench.benchkit import pct, publish
from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from clients.chatctl.regions import start_etcd
from infra.certs import Authority
from tests.sse import iter_events

ENV = {
    "CHAT_NODEAGENT_ENGINE": "sim",
    "CHAT_NODEAGENT_SIM_SPEED": "50",
    "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": "8,16",
    "CHAT_GATEWAY_ROUTER": "false",
    "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "100",
}


async def ttft(http: aiohttp.ClientSession, edge: str, token: str, conv: str, parent: str = ""):
    """(seconds to the first text, the region in meta, the message id)."""
    message_id = uuid.uuid4().hex[:12]
    body = {"content": f"Hello, this is message {message_id}",
            **({"parentId": parent} if parent else {})}  # fmt: skip
    start = time.perf_counter()
    first, region = None, ""
    async with http.post(
        f"{edge}/v1/conversations/{conv}/messages", json=body,
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": message_id},
    ) as response:  # fmt: skip
        assert response.status == 200, await response.text()
        async for event in iter_events(response):
            if event.event == "meta":
                region = event.data["region"]
            if event.event == "delta" and first is None:
                first = time.perf_counter() - start
    assert first is not None
    return first, region, message_id


async def admin_call(platform: LocalPlatform, method: str, request) -> object:
    async with platform.channel(platform.scheduler_address) as channel:
        stub = pb_grpc.SchedulerServiceStub(channel)
        return await getattr(stub, method)(
            request, metadata=(("authorization", f"Bearer {platform.admin_token}"),)
        )


async def until_rung(http: aiohttp.ClientSession, platform: LocalPlatform, rung: int) -> None:
    """Until the gateway's directory view shows its own region at rung."""
    port = platform._child("gateway").ready["metrics"]
    pattern = re.compile(
        rf'^gateway_region_rung\{{pool="small",region="{platform.settings.region}"\}} (\S+)$',
        re.MULTILINE,
    )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
            found = pattern.search(await response.text())
        if found and float(found.group(1)) == rung:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"rung {rung} not seen")


@contextlib.asynccontextmanager
async def two_regions() -> AsyncIterator[dict[str, LocalPlatform]]:
    """Regions a and b started on this machine, the global directory in an etcd of its own,
    one CA for both; every process stopped on the way out."""
    with TemporaryDirectory() as folder:
        (Path(folder) / "etcd").mkdir()
        etcd, endpoint = await start_etcd(Path(folder) / "etcd")
        authority = Authority.create()
        regions = {
            name: LocalPlatform(PlatformSettings(
                state_dir=Path(folder) / name, edge_listen="127.0.0.1:0", region=name,
                global_etcd_endpoint=endpoint, authority=authority, extra_env=ENV))
            for name in ("a", "b")
        }  # fmt: skip
        try:
            await asyncio.gather(*(p.start() for p in regions.values()))
            yield regions
        finally:
            await asyncio.gather(*(p.stop() for p in regions.values()))
            etcd.terminate()
            await etcd.wait()


async def measure(messages: int) -> dict[str, list[float]]:
    async with two_regions() as regions:
        a, b = regions["a"], regions["b"]
        created = await admin_call(
            a, "CreateUser", pb.CreateUserRequest(user_id="hop", tier=common_pb2.TIER_PLUS)
        )
        token = created.token  # type: ignore[attr-defined]
        results = await _runs(a, b, token, messages)
        away = await admin_call(
            b, "CreateUser", pb.CreateUserRequest(user_id="b-home", tier=common_pb2.TIER_PLUS)
        )
        results.update(await _lose(a, b, away.token))  # type: ignore[attr-defined]
        return results


async def _runs(a: LocalPlatform, b: LocalPlatform, token: str, n: int) -> dict[str, list[float]]:
    paths = ("at home", "other edge", "spilled, first turn", "spilled, later turn")
    results: dict[str, list[float]] = {path: [] for path in paths}
    async with aiohttp.ClientSession() as http:
        for _ in range(3):  # warm: channels, the tokenizer's system prompt count
            await ttft(http, a.edge_url, token, f"w{uuid.uuid4().hex[:8]}")
            await ttft(http, b.edge_url, token, f"w{uuid.uuid4().hex[:8]}")
        for _ in range(n):
            seconds, region, _ = await ttft(http, a.edge_url, token, f"h{uuid.uuid4().hex[:8]}")
            assert region == "a"
            results["at home"].append(seconds)
            seconds, region, _ = await ttft(http, b.edge_url, token, f"o{uuid.uuid4().hex[:8]}")
            assert region == "a"
            results["other edge"].append(seconds)
        await admin_call(a, "PinLadder", pb.PinLadderRequest(rung=3))
        await until_rung(http, a, 3)
        for _ in range(n):
            conv = f"s{uuid.uuid4().hex[:8]}"
            seconds, region, first_id = await ttft(http, a.edge_url, token, conv)
            assert region == "b"
            results["spilled, first turn"].append(seconds)
            seconds, region, _ = await ttft(http, a.edge_url, token, conv, first_id + ".answer")
            assert region == "b"
            results["spilled, later turn"].append(seconds)
    return results


async def _lose(a: LocalPlatform, b: LocalPlatform, token: str) -> dict[str, list[float]]:
    """Kills every process of b; (seconds until a's gateway has b out, until b's user is
    told at a to come back later: their history is at b)."""
    port = a._child("gateway").ready["metrics"]
    pattern = re.compile(r'^gateway_region_up\{region="b"\} (\S+)$', re.MULTILINE)
    async with aiohttp.ClientSession() as http:
        killed = time.perf_counter()
        for child in b.children:
            child.process.kill()
        while True:
            async with http.get(f"http://127.0.0.1:{port}/metrics") as response:
                found = pattern.search(await response.text())
            if found and float(found.group(1)) == 0:
                break
            await asyncio.sleep(0.05)
        out = time.perf_counter() - killed
        async with http.post(
            f"{a.edge_url}/v1/conversations/l{uuid.uuid4().hex[:8]}/messages",
            json={"content": "Anyone?"}, headers={"Authorization": f"Bearer {token}"},
        ) as response:  # fmt: skip
            assert (response.status, response.headers.get("Retry-After")) == (503, "10")
        refused = time.perf_counter() - killed
    return {"region b killed: out at a": [out], "b's user refused at a": [refused]}


def report(results: dict[str, list[float]], messages: int) -> str:
    home = pct(results["at home"], 0.5)
    lines = [
        f"regions: time to first text, {messages} messages each, 2 regions on one machine "
        "(loopback, mutual TLS, simulated replicas at 50x)",
        f"{'path':<22}{'p50 ms':>9}{'p90 ms':>9}{'extra p50 ms':>14}",
    ]
    summary = {}
    loss = {k: results.pop(k)[0] for k in list(results) if k.startswith(("region b", "b's"))}
    for name, values in results.items():
        p50, p90 = pct(values, 0.5), pct(values, 0.9)
        lines.append(f"{name:<22}{p50 * 1e3:>9.1f}{p90 * 1e3:>9.1f}{(p50 - home) * 1e3:>14.1f}")
        summary[name.replace(", ", "_").replace(" ", "_")] = {
            "p50_ms": round(p50 * 1e3, 1), "p90_ms": round(p90 * 1e3, 1)}  # fmt: skip
    for name, seconds in loss.items():
        lines.append(f"{name:<32}{seconds:>6.1f} s after the kill")
    lines.append("(goal: a region out within 10 s; published every 2 s, out after 6 s)")
    out, refused = loss["region b killed: out at a"], loss["b's user refused at a"]
    summary["region_loss_s"] = {"out": round(out, 1), "refused_elsewhere": round(refused, 1)}
    lines.append(json.dumps({"bench": "regions_hop", "messages": messages, **summary}))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=30)
    args = parser.parse_args()
    publish("regions_hop", report(asyncio.run(measure(args.messages)), args.messages))


if __name__ == "__main__":
    main()
