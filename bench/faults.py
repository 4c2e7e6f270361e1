"""Faults a user should see as a pause, not an error: how long the pause is, over many faults.

Each scenario starts its own local platform (the edge, two gateways sharing answers through a
real Redis, two simulated nodes), streams answers through the edge as an HTTP client would,
causes a fault mid-answer (after the 5th delta), and measures the pause the client sees: the
longest gap between two events it reads from the fault on (the dead process's last events may
still be in flight when it dies; every other gap is ~50 ms). The simulated engine's answer is a
function of its prompt, so a trial also checks that the whole text the client read is the
uninterrupted answer to the same prompt, character for character, that it is what was stored,
and that the event ids run 1..n without gap or repeat ("exact").

- node: the node writing the answer is SIGKILLed; the gateway sees its stream break and
  continues the answer on the other node from the text so far. Goal: p50 <= 1 s, max <= 3 s.
- node-drain: the node writing the answer is drained (`chatctl drain`): it takes no new answers
  and finishes this one. Goal as for a killed node; it should not pause at all.
- edge-gateway: the gateway the answer streams through is SIGKILLed; the edge re-attaches
  through the other gateway, which finds the dead one's port refusing connections and takes
  the answer over at once. Goal: p50 and max <= 1 s.
- edge-gw-no-probe: the same with `probe_gateways: false`: the answer is taken over once the
  dead gateway's liveness (gateway_liveness_s, 2 s) has run out, as before the probe.

Whatever a trial killed or drained is restarted or undrained before the next.

    PYTHONPATH=. .venv/bin/python bench/faults.py [--kills 20] [--scenario node ...]

Without the probe, the edge-gateway pause is the dead gateway's liveness key running out (up to
a third of it early, as it is renewed that often) plus up to a second until the surviving
gateway looks (its follow block and orphan sweep are 1 s each).

Prints a table and ends with one JSON line. Results land in bench/results/faults.txt and
bench/results/faults.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
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

from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.faults import kill, restart_the_dead, serving_node, streaming_gateway
from tests.servers import run_redis
from tests.simtext import expected_answer
from tests.sse import SseEvent, iter_events

KILL_AFTER_DELTAS = 5
SYSTEM_PROMPT = "You are a helpful assistant."
# Long enough to outlast the pause (about 40 tokens a second), short enough for many trials.
ANSWER_TOKENS = (200, 200)

# A fault caused mid-answer, given the replica serving it; undone after the trial.
Fault = Callable[[LocalPlatform, aiohttp.ClientSession, str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Trial:
    pause_s: float  # the longest gap between two events the client read, from the fault on
    ended: str  # the last event's name: "done", or "error" when the client got one
    exact: bool  # the uninterrupted answer, stored as read, ids 1..n


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    fault: Fault
    goal_max_s: float
    goal_p50_s: float | None = None
    # Settings of the services for this scenario alone.
    env: tuple[tuple[str, str], ...] = ()


def settings(state_dir: Path, redis_url: str, env: tuple[tuple[str, str], ...]) -> PlatformSettings:
    return PlatformSettings(
        state_dir=state_dir,
        edge_listen="127.0.0.1:0",
        nodes=2,
        gateways=2,
        redis_url=redis_url,
        extra_env={
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
            "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
            "CHAT_GATEWAY_ROUTER": "false",
            "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
            "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
            **dict(env),
        },
    )


# The faults ------------------------------------------------------------------------------------


async def kill_the_node(platform: LocalPlatform, http: aiohttp.ClientSession, replica: str) -> None:
    await kill(serving_node(platform, replica))


async def kill_the_gateway(
    platform: LocalPlatform, http: aiohttp.ClientSession, replica: str
) -> None:
    await kill(await streaming_gateway(http, platform))


async def drain_the_node(
    platform: LocalPlatform, http: aiohttp.ClientSession, replica: str
) -> None:
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as admin:
        await admin.drain(replica)


async def undrain_all(platform: LocalPlatform) -> None:
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as admin:
        for node in await admin.nodes():
            await admin.undrain(node.node_id)


SCENARIOS = [
    Scenario("node", kill_the_node, goal_max_s=3.0, goal_p50_s=1.0),
    Scenario("node-drain", drain_the_node, goal_max_s=3.0, goal_p50_s=1.0),
    Scenario("edge-gateway", kill_the_gateway, goal_max_s=1.0, goal_p50_s=1.0),
    # The same without the probe: the dead gateway's liveness has to run out.
    Scenario(
        "edge-gw-no-probe",
        kill_the_gateway,
        goal_max_s=3.0,
        env=(("CHAT_GATEWAY_PROBE_GATEWAYS", "false"),),
    ),
]


# One trial -------------------------------------------------------------------------------------


async def trial(fault: Fault, platform: LocalPlatform, http: aiohttp.ClientSession) -> Trial:
    bearer = {"Authorization": f"Bearer {platform.tokens['plus']}"}
    url = f"{platform.edge_url}/v1/conversations/c_{uuid.uuid4().hex[:8]}/messages"
    content = f"Tell me a long story, number {uuid.uuid4().hex[:6]}."
    events: list[tuple[float, SseEvent]] = []
    faulted_at = 0.0
    async with http.post(url, json={"content": content}, headers=bearer) as response:
        response.raise_for_status()
        async for event in iter_events(response):
            events.append((time.monotonic(), event))
            if not faulted_at and sum(e.event == "delta" for _, e in events) == KILL_AFTER_DELTAS:
                await fault(platform, http, events[0][1].data["replica"])
                faulted_at = time.monotonic()
    async with http.get(url, headers=bearer) as response:
        stored = (await response.json())["messages"][-1]["content"]
    assert faulted_at, "the answer ended before the fault"
    # Events sent before the fault may be read just after it, from the socket's buffer: the
    # pause is the longest gap from the fault on, not the one across it.
    seen = [at for at, _ in events]
    cut = max(i for i, at in enumerate(seen) if at <= faulted_at)
    pause_s = max(b - a for a, b in itertools.pairwise(seen[cut:]))
    text = "".join(e.data.get("text", "") for _, e in events if e.event == "delta")
    ids = [e.id for _, e in events]
    expected = expected_answer(content, SYSTEM_PROMPT, ANSWER_TOKENS)
    exact = ids == list(range(1, len(ids) + 1)) and text == stored == expected
    return Trial(pause_s, events[-1][1].event, exact)


# Running and reporting --------------------------------------------------------------------------


async def run_scenario(scenario: Scenario, kills: int, redis_url: str) -> list[Trial]:
    with tempfile.TemporaryDirectory(prefix=f"faults-{scenario.name}-") as folder:
        platform = LocalPlatform(settings(Path(folder), redis_url, scenario.env))
        await platform.start()
        try:
            async with aiohttp.ClientSession() as http:
                trials = []
                for i in range(kills):
                    one = await trial(scenario.fault, platform, http)
                    await undrain_all(platform)
                    await restart_the_dead(platform, http)
                    print(f"  {scenario.name} {i + 1}/{kills}: pause {one.pause_s:.2f} s, "
                          f"{one.ended}, {'exact' if one.exact else 'NOT EXACT'}",
                          file=sys.stderr, flush=True)  # fmt: skip
                    trials.append(one)
                return trials
        finally:
            await platform.stop()


def summary(scenario: Scenario, trials: list[Trial]) -> dict[str, object]:
    pauses = sorted(t.pause_s for t in trials)
    p50 = statistics.median(pauses)
    met = (
        pauses[-1] <= scenario.goal_max_s
        and (scenario.goal_p50_s is None or p50 <= scenario.goal_p50_s)
        and all(t.ended == "done" and t.exact for t in trials)
    )
    return {
        "kills": len(trials),
        "done": sum(t.ended == "done" for t in trials),
        "exact": sum(t.exact for t in trials),
        "pause_p50_s": round(p50, 2),
        "pause_p90_s": round(pauses[math.ceil(len(pauses) * 0.9) - 1], 2),
        "pause_max_s": round(pauses[-1], 2),
        "goal_p50_s": scenario.goal_p50_s,
        "goal_max_s": scenario.goal_max_s,
        "met": met,
        "pauses_s": [round(t.pause_s, 2) for t in trials],
    }


def report(results: dict[str, dict[str, object]], kills: int) -> str:
    lines = [
        f"faults: the pause an HTTP client sees when a process dies or is drained mid-answer, "
        f"{kills} faults per scenario; simulated nodes, real Redis, 2 CPUs shared by all",
        f"{'scenario':<14} {'kills':>5} {'done':>5} {'exact':>5} {'p50 s':>6} {'p90 s':>6} "
        f"{'max s':>6}  goal (p50, max)  met",
    ]
    for name, row in results.items():
        p50_goal = "-" if row["goal_p50_s"] is None else f"{row['goal_p50_s']:.0f} s"
        goal = f"{p50_goal}, {row['goal_max_s']:.0f} s"
        lines.append(
            f"{name:<14} {row['kills']:>5} {row['done']:>5} {row['exact']:>5} "
            f"{row['pause_p50_s']:>6.2f} {row['pause_p90_s']:>6.2f} {row['pause_max_s']:>6.2f}"
            f"  {goal:<15}  {'yes' if row['met'] else 'no'}"
        )
    lines.append(json.dumps({"bench": "faults", "scenarios": results}))
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20, help="faults per scenario")
    parser.add_argument("--scenario", choices=[s.name for s in SCENARIOS], action="append",
                        help="only these (default: all)")  # fmt: skip
    args = parser.parse_args()
    chosen = [s for s in SCENARIOS if not args.scenario or s.name in args.scenario]
    results = {}
    with run_redis() as redis:
        for db, scenario in enumerate(chosen):
            url = f"{redis.url.rsplit('/', 1)[0]}/{db}"
            trials = await run_scenario(scenario, args.kills, url)
            results[scenario.name] = summary(scenario, trials)
    text = report(results, args.kills)
    publish("faults", text)
    (Path(__file__).parent / "results" / "faults.json").write_text(text.splitlines()[-1] + "\n")


if __name__ == "__main__":
    asyncio.run(main())
