"""Faults a user should see as a pause, not an error: how long the pause is, over many kills.

Each scenario starts its own local platform (simulated nodes, a real Redis), streams answers
through the edge as an HTTP client would, kills a process mid-answer, and measures the pause
the client sees: the longest gap between two events it reads from the kill on (the dead
process's last events may still be in flight when it dies; every other gap is ~25 ms).
A trial also checks that the answer ended `done` with the stored text, ids without gap or
repeat. Scenarios are rows of SCENARIOS; node kills can join as rows of their own.

- edge-gateway: the gateway the answer streams through is SIGKILLed after the 5th delta; the
  edge re-attaches through the other gateway, which takes the answer over once the dead one's
  liveness (gateway_liveness_s, 3 s) has run out. The gateway is restarted before the next.
- edge-gw-live2s: the same with gateway_liveness_s 2 s: what that setting buys.

    .venv/bin/python bench/faults.py [--kills 20] [--scenario edge-gateway]

UNFINISHED: with the default gateway_liveness_s (3 s) the pause is about 3.1 s at p50, just
over the goal of 3 s. The edge re-attaches at once; the pause is the dead gateway's liveness
key running out (2-3 s after the kill: it is renewed every second) plus up to a second until
the surviving gateway looks (its follow block and orphan sweep are 1 s each). gateway_liveness_s
2 s meets the goal (edge-gw-live2s, about 2.1 s); whether to make that the default is open.

Prints a table and ends with one JSON line. Results land in bench/results/faults.txt and
bench/results/faults.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import math
import re
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from benchkit import publish

from clients.chatctl.platform import Child, LocalPlatform, PlatformSettings
from tests.servers import run_redis
from tests.sse import SseEvent, iter_events

GOAL_S = 3.0
KILL_AFTER_DELTAS = 5
STREAMING = re.compile(r"^gateway_answers_streaming ([0-9.]+)$", re.MULTILINE)
# Long enough to outlast the pause (about 40 tokens a second), short enough for many trials.
ANSWER_TOKENS = 200
READY_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Trial:
    pause_s: float  # the longest gap between two events the client read, from the kill on
    ended: str  # the last event's name: "done", or "error" when the client got one
    intact: bool  # ids 1..n, and the text read is the text stored


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    settings: Callable[[Path, str], PlatformSettings]  # state dir, Redis URL
    trial: Callable[[LocalPlatform, aiohttp.ClientSession], Awaitable[Trial]]


# edge-gateway ----------------------------------------------------------------------------------


def two_gateways(state_dir: Path, redis_url: str, liveness_s: float = 0.0) -> PlatformSettings:
    liveness = {"CHAT_GATEWAY_GATEWAY_LIVENESS_S": str(liveness_s)} if liveness_s else {}
    return PlatformSettings(
        state_dir=state_dir,
        edge_listen="127.0.0.1:0",
        nodes=2,
        gateways=2,
        redis_url=redis_url,
        extra_env={
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": f"{ANSWER_TOKENS},{ANSWER_TOKENS}",
            "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
            "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            **liveness,
        },
    )


async def streaming_gateway(http: aiohttp.ClientSession, platform: LocalPlatform) -> Child:
    """The gateway generating the one answer in flight, as its metrics tell."""
    while True:
        for child in platform.children:
            if child.name.startswith("gateway"):
                async with http.get(f"http://127.0.0.1:{child.ready['metrics']}/metrics") as r:
                    found = STREAMING.search(await r.text())
                if found and float(found.group(1)) == 1:
                    return child
        await asyncio.sleep(0.02)


async def all_gateways_serving(http: aiohttp.ClientSession, platform: LocalPlatform) -> None:
    """Until the edge reaches every gateway: a restarted one may wait out a reconnect backoff."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        async with http.get(f"{platform.edge_url}/readyz") as response:
            gateways = (await response.json()).get("gateways", {})
        if gateways and all(state == "serving" for state in gateways.values()):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"the edge does not reach every gateway: {gateways}")


async def kill_the_gateway(platform: LocalPlatform, http: aiohttp.ClientSession) -> Trial:
    await all_gateways_serving(http, platform)
    bearer = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    url = f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages"
    events: list[tuple[float, SseEvent]] = []
    killed: Child | None = None
    killed_at = 0.0
    body = {"content": f"Tell me a long story, number {uuid.uuid4().hex[:6]}."}
    async with http.post(url, json=body, headers=bearer) as response:
        response.raise_for_status()
        async for event in iter_events(response):
            events.append((time.monotonic(), event))
            if killed is None and sum(e.event == "delta" for _, e in events) == KILL_AFTER_DELTAS:
                killed = await streaming_gateway(http, platform)
                killed.process.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                await killed.process.wait()
    async with http.get(url, headers=bearer) as response:
        stored = (await response.json())["messages"][-1]["content"]
    assert killed is not None, "the answer ended before the kill"
    await platform.restart(killed.name)
    # Events the dead gateway sent before the kill may be read just after it, from the socket's
    # buffer: the pause is the longest gap from the kill on, not the one across the kill.
    seen = [at for at, _ in events]
    cut = max(i for i, at in enumerate(seen) if at <= killed_at)
    pause_s = max(b - a for a, b in itertools.pairwise(seen[cut:]))
    text = "".join(e.data.get("text", "") for _, e in events if e.event == "delta")
    ids = [e.id for _, e in events]
    intact = ids == list(range(1, len(ids) + 1)) and text == stored
    return Trial(pause_s, events[-1][1].event, intact)


SCENARIOS = [
    Scenario("edge-gateway", two_gateways, kill_the_gateway),
    # The same with gateways declared dead after 2 s of silence instead of 3.
    Scenario("edge-gw-live2s", functools.partial(two_gateways, liveness_s=2.0), kill_the_gateway),
]


# Running and reporting --------------------------------------------------------------------------


async def run_scenario(scenario: Scenario, kills: int, redis_url: str) -> list[Trial]:
    with tempfile.TemporaryDirectory(prefix=f"faults-{scenario.name}-") as folder:
        platform = LocalPlatform(scenario.settings(Path(folder), redis_url))
        await platform.start()
        try:
            async with aiohttp.ClientSession() as http:
                trials = []
                for i in range(kills):
                    trial = await scenario.trial(platform, http)
                    print(f"  {scenario.name} {i + 1}/{kills}: pause {trial.pause_s:.2f} s, "
                          f"{trial.ended}, {'intact' if trial.intact else 'NOT INTACT'}",
                          file=sys.stderr, flush=True)  # fmt: skip
                    trials.append(trial)
                return trials
        finally:
            await platform.stop()


def summary(trials: list[Trial]) -> dict[str, object]:
    pauses = sorted(t.pause_s for t in trials)
    return {
        "kills": len(trials),
        "done": sum(t.ended == "done" for t in trials),
        "intact": sum(t.intact for t in trials),
        "pause_p50_s": round(statistics.median(pauses), 2),
        "pause_p90_s": round(pauses[math.ceil(len(pauses) * 0.9) - 1], 2),
        "pause_max_s": round(pauses[-1], 2),
        "goal_s": GOAL_S,
        "met": pauses[-1] <= GOAL_S and all(t.ended == "done" and t.intact for t in trials),
        "pauses_s": [round(p, 2) for p in (t.pause_s for t in trials)],
    }


def report(results: dict[str, dict[str, object]], kills: int) -> str:
    lines = [
        f"faults: the pause an HTTP client sees when a process dies mid-answer, {kills} kills "
        "per scenario; simulated nodes, real Redis, 2 CPUs shared by all",
        f"{'scenario':<14} {'kills':>5} {'done':>5} {'intact':>6} {'p50 s':>6} {'p90 s':>6} "
        f"{'max s':>6} {'goal s':>6}  met",
    ]
    for name, row in results.items():
        lines.append(
            f"{name:<14} {row['kills']:>5} {row['done']:>5} {row['intact']:>6} "
            f"{row['pause_p50_s']:>6.2f} {row['pause_p90_s']:>6.2f} {row['pause_max_s']:>6.2f} "
            f"{row['goal_s']:>6.1f}  {'yes' if row['met'] else 'no'}"
        )
    lines.append(json.dumps({"bench": "faults", "scenarios": results}))
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="kills per scenario")
    parser.add_argument("--scenario", choices=[s.name for s in SCENARIOS], action="append",
                        help="only these (default: all)")  # fmt: skip
    args = parser.parse_args()
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    results = {}
    with run_redis() as redis:
        for db, scenario in enumerate(chosen):
            url = f"{redis.url.rsplit('/', 1)[0]}/{db}"
            results[scenario.name] = summary(await run_scenario(scenario, args.kills, url))
    text = report(results, args.kills)
    publish("faults", text)
    (Path(__file__).parent / "results" / "faults.json").write_text(text.splitlines()[-1] + "\n")


if __name__ == "__main__":
    asyncio.run(main())
