"""The data plane at a GPU node's line rate: many answers at once on each node, through one
gateway and one edge, with what each process spends per token and how long a token takes from
the engine to the user.

4 nodes of the simulated engine (a 70B on four H100s, slowed so that each of 64 answers
at once streams at about 40 tokens/s: about 10,000 tokens/s in all), 64 answers at once on
each, read as SSE from the edge. Figures:
- CPU per 1,000 tokens delivered, of the edge, the gateway, the nodeagents (together) and the
  scheduler (utime + stime from /proc over the load phase);
- engine-to-user delay p50/p99: for every token, from the end of the engine step that made it
  (bench/line_rate_probe notes each step in the nodeagents, patching the simulated engine
  from outside, so any checkout is measured the same way) to the edge's SSE read that
  brought it (CLOCK_MONOTONIC is one clock for every process of the machine).
The output check and the router are off: they hold text back by design, and this measures the
path a token takes, not a policy. Node and gateway keep their shipped stream intervals.

    .venv/bin/python bench/line_rate.py [--nodes 4] [--answers 64] [--tokens 400]
        [--speed 0.72] [--against DIR] [--name line_rate]

--against DIR adds the same run of another checkout (its services import DIR), one after the
other in the same bench run. Prints a table and ends with one JSON line; results land in
bench/results/<name>.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from benchkit import checkout_env, cpu_seconds, pct, publish

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from clients.chatctl.platform import LocalPlatform, PlatformSettings  # noqa: E402
from nodeagent.sim import count_tokens  # noqa: E402

PROBE = HERE / "line_rate_probe"
TOPICS = ["rivers", "owls", "bread", "comets", "glass", "tides", "maps", "bees"]


@dataclass
class Answer:
    message_id: str
    # (time of the SSE read, tokens of the answer received so far), one per delta read.
    reads: list[tuple[float, int]] = field(default_factory=list)
    text: str = ""
    done: bool = False


def settings(
    state: Path, checkout: Path, probe: Path, args: argparse.Namespace
) -> PlatformSettings:
    env = checkout_env(str(checkout))
    env["PYTHONPATH"] = f"{PROBE}:{env['PYTHONPATH']}"
    return PlatformSettings(
        state_dir=state,
        edge_listen="127.0.0.1:0",
        nodes=args.nodes,
        extra_env={
            **env,
            "LINE_RATE_PROBE": str(probe),
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_PRESET": "70b-4xh100",
            "CHAT_NODEAGENT_SIM_SPEED": str(args.speed),
            "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": f"{args.tokens},{args.tokens}",
            "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": str(args.tokens),
            "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
            "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "1000000",
            "CHAT_GATEWAY_SAFETY": "false",
            "CHAT_GATEWAY_ROUTER": "false",
            "CHAT_EDGE_MAX_REQUESTS_PER_IP": "0",
            "CHAT_GATEWAY_LOG_LEVEL": "warning",
            "CHAT_EDGE_LOG_LEVEL": "warning",
            "CHAT_NODEAGENT_LOG_LEVEL": "warning",
            # This checkout's answers go over the node link; a checkout without it ignores this.
            "CHAT_GATEWAY_NODE_LINK": "true",
        },
    )


async def read_answer(
    http: aiohttp.ClientSession, platform: LocalPlatform, answer: Answer, i: int
) -> None:
    async with http.post(
        f"{platform.edge_url}/v1/conversations/lr{i}x{uuid.uuid4().hex[:8]}/messages",
        json={"content": f"Message {i}: tell me about {TOPICS[i % len(TOPICS)]}."},
        headers={"Authorization": f"Bearer {platform.tokens['plus']}",
                 "Idempotency-Key": answer.message_id},
    ) as response:  # fmt: skip
        if response.status != 200:
            raise RuntimeError(f"edge answered {response.status}: {await response.text()}")
        event = ""
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: ") and event == "delta":
                answer.text += json.loads(line[6:])["text"]
                answer.reads.append((time.monotonic(), count_tokens(answer.text)))
            elif line.startswith("data: ") and event == "done":
                answer.done = True


def engine_steps(probe: Path) -> dict[str, list[tuple[float, int]]]:
    """Per request id: (when a step ended, the tokens the answer had by then)."""
    steps: dict[str, list[tuple[float, int]]] = {}
    for path in probe.glob("*.steps"):
        for line in path.read_text().splitlines():
            when, *parts = line.split(" ")
            for part in parts:
                request_id, _, emitted = part.rpartition("=")
                steps.setdefault(request_id, []).append((float(when), int(emitted)))
    return steps


def delays(answers: list[Answer], steps: dict[str, list[tuple[float, int]]]) -> list[float]:
    """For every token: its SSE read's time less its engine step's end."""
    by_message = {request_id.split("/")[1]: made for request_id, made in steps.items()}
    found: list[float] = []
    for answer in answers:
        made = by_message.get(answer.message_id)
        if made is None:
            continue
        made_at: dict[int, float] = {}
        before = 0
        for when, emitted in made:
            for token in range(before + 1, emitted + 1):
                made_at[token] = when
            before = max(before, emitted)
        before = 0
        for when, received in answer.reads:
            for token in range(before + 1, received + 1):
                if token in made_at:
                    found.append(when - made_at[token])
            before = max(before, received)
    return found


async def measure(label: str, checkout: Path, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        probe = Path(folder) / "probe"
        probe.mkdir()
        platform = LocalPlatform(settings(Path(folder) / "state", checkout, probe, args))
        await platform.start()
        try:
            return await load(label, platform, probe, args)
        finally:
            await platform.stop()


async def load(
    label: str, platform: LocalPlatform, probe: Path, args: argparse.Namespace
) -> dict[str, float]:
    pids = {c.name: c.process.pid for c in platform.children}
    groups = {
        "edge": [pid for name, pid in pids.items() if name.startswith("edge")],
        "gateway": [pid for name, pid in pids.items() if name.startswith("gateway")],
        "nodes": [pid for name, pid in pids.items() if name.startswith("nodeagent")],
        "scheduler": [pid for name, pid in pids.items() if name.startswith("scheduler")],
    }
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=args.tokens / 5 + 120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        warm = [Answer(f"w{i}{uuid.uuid4().hex[:8]}") for i in range(8)]
        await asyncio.gather(*(read_answer(http, platform, a, i) for i, a in enumerate(warm)))
        answers = [Answer(f"m{i}{uuid.uuid4().hex[:8]}") for i in range(args.nodes * args.answers)]
        before = {group: sum(map(cpu_seconds, ps)) for group, ps in groups.items()}
        started = time.monotonic()
        await asyncio.gather(*(read_answer(http, platform, a, i) for i, a in enumerate(answers)))
        seconds = time.monotonic() - started
        spent = {group: sum(map(cpu_seconds, ps)) - before[group] for group, ps in groups.items()}
    tokens = sum(count_tokens(a.text) for a in answers)
    found = delays(answers, await asyncio.to_thread(engine_steps, probe))
    result: dict[str, float] = {
        "answers": len(answers),
        "unfinished": sum(not a.done for a in answers),
        "tokens": tokens,
        "seconds": round(seconds, 1),
        "tokens_per_s": round(tokens / seconds),
        "delay_p50_ms": round(pct(found, 0.5) * 1000, 1) if found else -1,
        "delay_p99_ms": round(pct(found, 0.99) * 1000, 1) if found else -1,
        "delay_tokens": len(found),
    }
    for group, cpu in spent.items():
        result[f"{group}_cpu_ms_per_1k_tokens"] = round(cpu / max(1, tokens) * 1e6, 1)
    print(f"{label}: {json.dumps(result)}", file=sys.stderr)
    return result


def table(results: dict[str, dict[str, float]], args: argparse.Namespace) -> str:
    labels = list(results)
    rows = [
        ("answers at once (all nodes)", "answers"),
        ("answers not ended with done", "unfinished"),
        ("tokens delivered", "tokens"),
        ("tokens/s", "tokens_per_s"),
        ("edge CPU ms / 1,000 tokens", "edge_cpu_ms_per_1k_tokens"),
        ("gateway CPU ms / 1,000 tokens", "gateway_cpu_ms_per_1k_tokens"),
        ("nodeagents CPU ms / 1,000 tokens", "nodes_cpu_ms_per_1k_tokens"),
        ("scheduler CPU ms / 1,000 tokens", "scheduler_cpu_ms_per_1k_tokens"),
        ("engine-to-user delay p50 ms", "delay_p50_ms"),
        ("engine-to-user delay p99 ms", "delay_p99_ms"),
    ]
    lines = [
        f"line rate: {args.nodes} sim nodes x {args.answers} answers of {args.tokens} tokens "
        f"(speed {args.speed}), one gateway, one edge, {os.cpu_count()} CPUs",
        "| figure | " + " | ".join(labels) + " |",
        "|---|" + "---|" * len(labels),
    ]
    for name, key in rows:
        lines.append(f"| {name} | " + " | ".join(str(results[x][key]) for x in labels) + " |")
    return "\n".join(lines)


async def run(args: argparse.Namespace, against: Path | None) -> None:
    results = {"this": await measure("this", HERE.parent, args)}
    if against is not None:
        results["against"] = await measure("against", against, args)
    text = table(results, args)
    line = {"bench": "line_rate", **vars(args), "results": results}
    publish(args.name, text + "\n" + json.dumps(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--answers", type=int, default=64, help="answers at once per node")
    parser.add_argument("--tokens", type=int, default=400, help="tokens per answer")
    parser.add_argument("--speed", type=float, default=0.72, help="the simulator's pace")
    parser.add_argument("--against", default="", help="another checkout, run the same way")
    parser.add_argument("--name", default="line_rate")
    args = parser.parse_args()
    asyncio.run(run(args, Path(args.against).resolve() if args.against else None))


if __name__ == "__main__":
    main()
