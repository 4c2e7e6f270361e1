"""SSE at the edge: events/s and peak memory for N concurrent streams of 400 events through
edge + gateway, against a minimal aiohttp SSE server writing the same events (the floor for
this stack), side by side in one run; then idle open streams per edge process and memory per
stream. Simulated replicas run far faster than real time, so the engine is not the limit.

    .venv/bin/python bench/edge.py [--streams 200,2000] [--idle 10000] [--rounds 1]
                                   [--against DIR]
    .venv/bin/python bench/edge.py --complete 10000 [--complete-events 40]

--complete N starts N streams at once and lets each run to its end (up to --complete-limit-s):
every one must end `done`. It runs alone and lands in bench/results/edge_complete.txt.

--against DIR adds a second platform whose services import another checkout (say one of the
commit before a change: `git worktree add ../before HEAD~1`), measured in the same rounds, the
two taking turns: a change's effect side by side on a noisy machine. At 2,000 streams take one
round: a phase cut at 45 s leaves the gateway writing the cut answers (kept for a resume), and
a slow platform is still at it when the next round starts. --idle 0 skips the idle part,
--streams "" the streaming part; with --against, the idle part runs on both checkouts.

Prints a table and ends with one JSON line. Results land in bench/results/edge.txt and
bench/results/edge.json (the idle part alone: bench/results/edge_idle.txt).

Nodes send one token a chunk here (stream interval 0), so a stream is EVENTS events and the
figure is the relay's cost per event. "refused" counts streams answered with an HTTP error
before their first event, "no done" those that ended without `done`; both must be 0.
UNFINISHED: the goal of 0.5 of the raw server's events/s is met at 200 streams, not at 2,000
(0.43; bench/results/where_the_time_goes.md, "Streaming", says what stands in the way).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web
from benchkit import checkout_env, cpu_seconds, publish

from clients.chatctl.platform import LocalPlatform, PlatformSettings
from domain.types import Role
from nodeagent.engine import PromptTurn
from nodeagent.llamacpp import free_port
from nodeagent.sim import planned_answer

EVENTS = 400  # per stream: meta, 398 deltas, done
DELTAS = EVENTS - 2
# Each phase stops here: 2,000 streams through edge + gateway on a 2-core machine would take
# minutes; the rate over the first LIMIT_S seconds, all streams running, is the figure.
LIMIT_S = 45.0
# Set on the gateway, so the answers the simulator plans for each prompt are known here.
SYSTEM_PROMPT = "You are a helpful assistant."


# Measuring processes -----------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else 0


@dataclass
class Watch:
    """Peak RSS and CPU seconds of some processes while a phase runs."""

    pids: dict[str, int]
    peak: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)

    async def during(self, work: Awaitable[object]) -> None:
        start_cpu = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        self.peak = {name: rss_bytes(pid) for name, pid in self.pids.items()}
        task = asyncio.ensure_future(work)
        while not task.done():
            for name, pid in self.pids.items():
                self.peak[name] = max(self.peak[name], rss_bytes(pid))
            await asyncio.wait({task}, timeout=0.05)
        task.result()
        self.cpu = {name: cpu_seconds(pid) - start_cpu[name] for name, pid in self.pids.items()}


# Clients -----------------------------------------------------------------------------------------


async def count_events(response: aiohttp.ClientResponse, tally: list[int]) -> int:
    """Reads a stream to its end, adding each event to tally[0] as it arrives; a stream
    refused before its first event adds to tally[1] (and prints why, once per status), one
    that ends without `done` to tally[2]."""
    if response.status != 200:
        tally[1] += 1
        if tally[1] == 1:
            print(
                f"a stream was refused: {response.status} {await response.text()}", file=sys.stderr
            )
        return 0
    events = 0
    last = b""
    async for line in response.content:
        if line.startswith(b"data: "):
            events += 1
            tally[0] += 1
        elif line.startswith(b"event: "):
            last = line
    if last.strip() != b"event: done":
        tally[2] += 1
        if tally[2] == 1:
            print(f"a stream ended without done: {last!r} after {events} events", file=sys.stderr)
    return events


def long_prompts(count: int, deltas: int = DELTAS) -> list[str]:
    """Prompts whose simulated answer has at least `deltas` tokens, so every stream, capped at
    `deltas` answer tokens, carries exactly `deltas` + 2 events."""
    system = PromptTurn(Role.SYSTEM, SYSTEM_PROMPT)
    found: list[str] = []
    i = 0
    while len(found) < count:
        text = f"Stream {i}: tell me everything."
        if len(planned_answer([system, PromptTurn(Role.USER, text)], (100, 700))) >= deltas:
            found.append(text)
        i += 1
    return found


Opener = Callable[[aiohttp.ClientSession, int, list[int]], Awaitable[int]]


async def concurrent(
    streams: int, open_one: Opener, limit_s: float
) -> tuple[int, float, int, int, int]:
    """Events received, seconds taken, streams refused, streams ended without `done` and
    streams cut, for `streams` streams started at once; streams still open after limit_s are
    cut (neither refused nor unfinished), and what they carried until then counts."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
    tally = [0, 0, 0]
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        started = time.perf_counter()
        tasks = [asyncio.ensure_future(open_one(http, i, tally)) for i in range(streams)]
        done, pending = await asyncio.wait(tasks, timeout=limit_s)
        seconds = time.perf_counter() - started
        received = tally[0]
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            task.result()  # a stream that failed fails the run
    return received, seconds, tally[1], tally[2], len(pending)


# The floor: a minimal SSE server in a process of its own -----------------------------------------


async def raw_stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    await response.write(b'id: 1\nevent: meta\ndata: {"model":"raw"}\n\n')
    for i in range(DELTAS):
        await response.write(f'id: {i + 2}\nevent: delta\ndata: {{"text":" word"}}\n\n'.encode())
    await response.write(f'id: {EVENTS}\nevent: done\ndata: {{"finish":"length"}}\n\n'.encode())
    return response


def serve_raw(port: int) -> None:
    app = web.Application()
    app.router.add_get("/stream", raw_stream)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


async def start_raw() -> tuple[asyncio.subprocess.Process, str]:
    port = free_port()
    process = await asyncio.create_subprocess_exec(sys.executable, __file__, "--serve-raw",
                                                   str(port))  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as http:
        for _ in range(100):
            try:
                async with http.get(f"{url}/stream") as response:
                    await response.read()
                return process, url
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.1)
    raise RuntimeError("the raw SSE server did not start")


# Phases ------------------------------------------------------------------------------------------


def platform_settings(
    state: Path, speed: str, nodes: int, deltas: int = DELTAS
) -> PlatformSettings:
    return PlatformSettings(
        state_dir=state,
        edge_listen="127.0.0.1:0",
        nodes=nodes,
        extra_env={
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_PRESET": "8b-1xh100",
            "CHAT_NODEAGENT_SIM_SPEED": speed,
            "CHAT_GATEWAY_PLUS_MAX_ANSWER_TOKENS": str(deltas),
            "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
            "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "1000000",
            "CHAT_EDGE_MAX_REQUESTS_PER_IP": "0",
            "CHAT_EDGE_KEEPALIVE_S": "60",
            # The output check releases text every 16 tokens, and the router picks a pool per
            # message: both off, so each token is one event and every stream carries EVENTS.
            "CHAT_GATEWAY_SAFETY": "false",
            "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
            "CHAT_GATEWAY_ROUTER": "false",
            # Nodes batch tokens every 50 ms by default; at 1000x real time a whole answer
            # would come in a few chunks. One token a chunk makes every stream EVENTS events.
            "CHAT_NODEAGENT_STREAM_INTERVAL_S": "0",
            "CHAT_GATEWAY_LOG_LEVEL": "warning",
            "CHAT_EDGE_LOG_LEVEL": "warning",
        },
    )


def pids_of(platform: LocalPlatform, *names: str) -> dict[str, int]:
    return {c.name: c.process.pid for c in platform.children if c.name in names}


def phase_result(outcome: tuple[int, float, int, int, int]) -> dict[str, float]:
    events, seconds, refused, unfinished, cut = outcome
    return {
        "events": events,
        "refused_streams": refused,
        "unfinished_streams": unfinished,
        "cut_streams": cut,
        "seconds": round(seconds, 2),
        "events_per_s": round(events / seconds),
    }


@dataclass
class PlatformSubject:
    """One platform under measurement; `checkout` (empty: this one) is where its services
    import the code from, so two versions run side by side in the same rounds."""

    checkout: str
    state: Path
    # Answer tokens a stream carries (its events: these, meta and done).
    deltas: int = DELTAS
    platform: LocalPlatform | None = None
    prompts: list[str] = field(default_factory=list)

    async def start(self, most_streams: int) -> None:
        settings = platform_settings(self.state, "1000", nodes=2, deltas=self.deltas)
        if self.checkout:
            settings.extra_env.update(checkout_env(self.checkout))
            # `python -m` would put the working directory (this checkout) first on the path.
            settings.extra_env["PYTHONSAFEPATH"] = "1"
        self.platform = LocalPlatform(settings)
        await self.platform.start()
        self.prompts = long_prompts(most_streams, self.deltas)
        await concurrent(20, self.one, LIMIT_S)  # warm up: channels, tokenizer cache, the sim

    async def one(self, http: aiohttp.ClientSession, i: int, tally: list[int]) -> int:
        platform = self.started
        async with http.post(
            f"{platform.edge_url}/v1/conversations/b{i}_{time.monotonic_ns()}/messages",
            json={"content": self.prompts[i]},
            headers={"Authorization": f"Bearer {platform.tokens['plus']}"},
        ) as response:
            return await count_events(response, tally)

    @property
    def started(self) -> LocalPlatform:
        if self.platform is None:
            raise RuntimeError("the platform is not started")
        return self.platform

    async def measure(self, streams: int, limit_s: float = LIMIT_S) -> dict[str, float]:
        nodes = [c.name for c in self.started.children if c.name.startswith("nodeagent")]
        watch = Watch(pids_of(self.started, "edge", "gateway", *nodes) | {"client": os.getpid()})
        outcome: list[tuple[int, float, int, int, int]] = []

        async def run() -> None:
            outcome.append(await concurrent(streams, self.one, limit_s))

        await watch.during(run())
        return {
            **phase_result(outcome[0]),
            "edge_peak_mb": round(watch.peak["edge"] / 2**20, 1),
            "gateway_peak_mb": round(watch.peak["gateway"] / 2**20, 1),
            "edge_cpu_s": round(watch.cpu["edge"], 1),
            "gateway_cpu_s": round(watch.cpu["gateway"], 1),
            # Not the figure, but on a shared machine what else took the cores meanwhile.
            "nodes_cpu_s": round(sum(watch.cpu[name] for name in nodes), 1),
            "client_cpu_s": round(watch.cpu["client"], 1),
        }

    async def stop(self) -> None:
        if self.platform is not None:
            await self.platform.stop()


@dataclass
class RawSubject:
    process: asyncio.subprocess.Process | None = None
    url: str = ""

    async def start(self, most_streams: int) -> None:
        self.process, self.url = await start_raw()
        await concurrent(20, self.one, LIMIT_S)

    async def one(self, http: aiohttp.ClientSession, i: int, tally: list[int]) -> int:
        async with http.get(f"{self.url}/stream") as response:
            return await count_events(response, tally)

    async def measure(self, streams: int) -> dict[str, float]:
        if self.process is None:
            raise RuntimeError("the raw server is not started")
        watch = Watch({"raw": self.process.pid, "client": os.getpid()})
        outcome: list[tuple[int, float, int, int, int]] = []

        async def run() -> None:
            outcome.append(await concurrent(streams, self.one, LIMIT_S))

        await watch.during(run())
        return {
            **phase_result(outcome[0]),
            "peak_mb": round(watch.peak["raw"] / 2**20, 1),
            "cpu_s": round(watch.cpu["raw"], 1),
            "client_cpu_s": round(watch.cpu["client"], 1),
        }

    async def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            await self.process.wait()


async def open_requests(http: aiohttp.ClientSession, edge_url: str) -> int:
    async with http.get(f"{edge_url}/metrics") as response:
        text = await response.text()
    found = re.search(r"^edge_open_requests (\S+)$", text, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


async def idle_streams(target: int, checkout: str = "") -> dict[str, float]:
    """Streams attached to an answer so slow it is idle (a token every few minutes), each
    past its meta event: what one edge process holds open, and the memory each costs it.
    checkout: another checkout's services instead of this one's."""
    with tempfile.TemporaryDirectory() as state:
        settings = platform_settings(Path(state), "0.0001", nodes=1)
        if checkout:
            settings.extra_env.update(checkout_env(checkout))
        platform = LocalPlatform(settings)
        await platform.start()
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        tasks: list[asyncio.Task[int]] = []
        try:
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
                auth = {"Authorization": f"Bearer {platform.tokens['plus']}"}
                message = f"idle_{time.monotonic_ns()}"
                slow = await http.post(
                    f"{platform.edge_url}/v1/conversations/c_{message}/messages",
                    json={"content": "Tell me a long story."},
                    headers={**auth, "Idempotency-Key": message},
                )
                await asyncio.sleep(1.0)  # the meta event is logged before any token
                edge_pid = pids_of(platform, "edge")["edge"]
                gateway_pid = pids_of(platform, "gateway")["gateway"]
                before = rss_bytes(edge_pid), rss_bytes(gateway_pid)
                started = time.perf_counter()

                async def attach() -> int:
                    async with http.get(
                        f"{platform.edge_url}/v1/messages/{message}/stream",
                        # From the start: the meta event goes out and the response
                        # is open, as for a user waiting on a silent model (after event 1
                        # the edge would still be waiting for a first event to send headers).
                        headers=auth,
                    ) as response:
                        return await count_events(response, [0, 0, 0])

                for batch in range(0, target, 500):
                    for _ in range(min(500, target - batch)):
                        tasks.append(asyncio.create_task(attach()))
                    while await open_requests(http, platform.edge_url) < len(tasks):
                        failed = [t for t in tasks if t.done()]
                        if failed:
                            raise RuntimeError(f"a stream ended: {failed[0].exception()!r}")
                        await asyncio.sleep(0.2)
                opened = await open_requests(http, platform.edge_url)
                seconds = time.perf_counter() - started
                await asyncio.sleep(2.0)  # let allocations settle before reading RSS
                after = rss_bytes(edge_pid), rss_bytes(gateway_pid)
                slow.close()
        except (RuntimeError, OSError) as error:
            print(f"idle streams stopped early: {error}", file=sys.stderr)
            opened, seconds, after = len(tasks), 0.0, (0, 0)
            before = (0, 0)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await platform.stop()
    return {
        "open_streams": opened,
        "open_seconds": round(seconds, 1),
        "edge_rss_mb": round(after[0] / 2**20, 1),
        "edge_kb_per_stream": round((after[0] - before[0]) / max(1, opened) / 1024, 1),
        "gateway_kb_per_stream": round((after[1] - before[1]) / max(1, opened) / 1024, 1),
    }


async def complete_streams(streams: int, deltas: int, limit_s: float) -> dict[str, float]:
    """`streams` streams of `deltas` answer tokens started at once through one edge and one
    gateway process, with no cut short of limit_s: how many end `done`, and what it took."""
    with tempfile.TemporaryDirectory() as state:
        subject = PlatformSubject("", Path(state), deltas=deltas)
        try:
            await subject.start(streams)
            return {"streams": streams, "events_per_stream": deltas + 2,
                    **await subject.measure(streams, limit_s)}  # fmt: skip
        finally:
            await subject.stop()


def complete_report(figures: dict[str, float], limit_s: float) -> str:
    ended = figures["streams"] - figures["refused_streams"] - figures["unfinished_streams"]
    done = ended - figures["cut_streams"]
    lines = [
        f"edge --complete: {figures['streams']} SSE streams of {figures['events_per_stream']} "
        f"events started at once through one edge and one gateway process (2 simulated "
        f"replicas, 1000x real time), none cut before {limit_s:.0f} s; {os.cpu_count()} CPUs "
        f"shared by all",
        f"ended done: {done} of {figures['streams']} (refused {figures['refused_streams']}, "
        f"ended without done {figures['unfinished_streams']}, still open at the limit "
        f"{figures['cut_streams']}) in {figures['seconds']} s, {figures['events_per_s']} events/s",
        f"peak RSS: edge {figures['edge_peak_mb']} MB, gateway {figures['gateway_peak_mb']} MB; "
        f"CPU s: edge {figures['edge_cpu_s']}, gateway {figures['gateway_cpu_s']}, nodes "
        f"{figures['nodes_cpu_s']}, client {figures['client_cpu_s']}",
        json.dumps({"bench": "edge_complete", "all_done": done == figures["streams"], **figures}),
    ]
    return "\n".join(lines)


# Report ------------------------------------------------------------------------------------------

# rounds[i][label][streams]: one round's figures for each subject ("raw", "platform", "against").
Rounds = list[dict[str, dict[str, dict[str, float]]]]


def platform_row(n: str, label: str, p: dict, raw_rate: float) -> str:
    p_mb = f"{p['edge_peak_mb']}+{p['gateway_peak_mb']}"
    p_cpu = p["edge_cpu_s"] + p["gateway_cpu_s"]
    return (f"{n:>8} {label:<9} {p['events_per_s']:>9} {p['seconds']:>8} {p_mb:>11} "
            f"{p_cpu:>6.1f} {p['nodes_cpu_s']:>6.1f} {p['client_cpu_s']:>6.1f} "
            f"{p['refused_streams']:>7} {p['unfinished_streams']:>7}  "
            f"{p['events_per_s'] / max(1, raw_rate):.3f}")  # fmt: skip


def raw_row(n: str, r: dict) -> str:
    return (f"{n:>8} {'raw':<9} {r['events_per_s']:>9} {r['seconds']:>8} "
            f"{r['peak_mb']:>11} {r['cpu_s']:>6.1f} {'-':>6} {r['client_cpu_s']:>6.1f} "
            f"{r['refused_streams']:>7} "
            f"{r['unfinished_streams']:>7}")  # fmt: skip


def median_ratio(rounds: Rounds, label: str, n: str) -> float:
    return statistics.median(
        r[label][n]["events_per_s"] / max(1, r["raw"][n]["events_per_s"]) for r in rounds
    )


def idle_line(label: str, idle: dict) -> str:
    return (
        f"idle ({label}): {idle['open_streams']} streams open on one edge process in "
        f"{idle['open_seconds']} s; {idle['edge_kb_per_stream']} KB each at the edge "
        f"({idle['edge_rss_mb']} MB RSS), {idle['gateway_kb_per_stream']} KB at the gateway"
    )


def report(counts: list[int], rounds: Rounds, idle: dict, against: str, idle_against: dict) -> str:
    labels = ["platform", *(["against"] if against else [])]
    lines = [
        f"edge: SSE streams of {EVENTS} events, edge + gateway (2 simulated replicas, 1000x "
        f"real time) vs a raw aiohttp SSE server; {os.cpu_count()} CPUs shared by all; "
        f"each phase cut at {LIMIT_S:.0f} s; {len(rounds)} round(s); CPU s: edge + gateway "
        f"(raw: the server), then the nodes' and the client's"
        + (f", 'against' imports {against}, order alternating" if against else ""),
        f"{'streams':>8} {'path':<9} {'events/s':>9} {'seconds':>8} {'peak MB':>11} "
        f"{'CPU s':>6} {'nodes':>6} {'client':>6} {'refused':>7} {'no done':>7}  ratio",
    ]
    for n in map(str, counts):
        for figures in rounds:
            raw = figures["raw"][n]
            lines.extend(platform_row(n, label, figures[label][n], raw["events_per_s"])
                         for label in labels)  # fmt: skip
            lines.append(raw_row(n, raw))
    for n in map(str, counts):
        medians = ", ".join(f"{label} {median_ratio(rounds, label, n):.3f}" for label in labels)
        lines.append(f"median ratio to raw at {n} streams: {medians}")
        if against:
            gains = [r["platform"][n]["events_per_s"] / max(1, r["against"][n]["events_per_s"])
                     for r in rounds]  # fmt: skip
            lines.append(f"platform / against at {n} streams, each round: "
                         + ", ".join(f"{g:.2f}" for g in gains))  # fmt: skip
    if idle:
        lines.append(idle_line("this", idle))
    if idle_against:
        lines.append(idle_line(against, idle_against))
    # --streams "" measures the idle part alone.
    last = rounds[-1] if rounds else {"platform": {}, "raw": {}}
    result = {
        "bench": "edge",
        "events_per_stream": EVENTS,
        "platform": last["platform"],
        "raw": last["raw"],
        "ratio": {n: round(median_ratio(rounds, "platform", n), 3) for n in map(str, counts)},
        "rounds": rounds,
        "idle": idle,
    }
    if idle_against:
        result["idle_against"] = idle_against
    if against:
        result["against"] = against
        result["against_ratio"] = {
            n: round(median_ratio(rounds, "against", n), 3) for n in map(str, counts)
        }
    lines.append(json.dumps(result))
    return "\n".join(lines)


async def measure_rounds(counts: list[int], rounds: int, against: str) -> Rounds:
    """Each round measures every stream count on the raw server and each platform, the
    platforms' order alternating from round to round, so both see the same machine."""
    with tempfile.TemporaryDirectory() as state:
        raw = RawSubject()
        platforms = {"platform": PlatformSubject("", Path(state) / "this")}
        if against:
            platforms["against"] = PlatformSubject(against, Path(state) / "against")
        subjects: dict[str, RawSubject | PlatformSubject] = {"raw": raw, **platforms}
        results: Rounds = []
        try:
            for subject in subjects.values():
                await subject.start(max(counts))
            for i in range(rounds):
                order = list(platforms) if i % 2 == 0 else list(platforms)[::-1]
                figures: dict[str, dict[str, dict[str, float]]] = {k: {} for k in subjects}
                for n in counts:
                    for label in ["raw", *order]:
                        figures[label][str(n)] = await subjects[label].measure(n)
                        # As it comes, so a long run that fails later still says something.
                        print(f"round {i} {n} {label}: {figures[label][str(n)]}", file=sys.stderr)
                results.append(figures)
        finally:
            for subject in subjects.values():
                await subject.stop()
    return results


async def run(counts: list[int], idle_target: int, rounds: int, against: str) -> str:
    measured = await measure_rounds(counts, rounds, against) if counts else []
    idle = await idle_streams(idle_target) if idle_target > 0 else {}
    # The other checkout's idle streams, one platform after the other (memory, unlike
    # events/s, hardly moves with the machine's load).
    idle_against = await idle_streams(idle_target, against) if idle_target > 0 and against else {}
    return report(counts, measured, idle, against, idle_against)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-raw":
        serve_raw(int(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", default="200,2000")
    parser.add_argument("--idle", type=int, default=10_000, help="0 skips the idle part")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--against", default="", help="another checkout, measured side by side")
    parser.add_argument(
        "--complete",
        type=int,
        default=0,
        help="N streams started at once, each to its end (0: skipped)",
    )
    parser.add_argument(
        "--complete-events",
        type=int,
        default=40,
        help="events a --complete stream carries (meta and done included)",
    )
    parser.add_argument("--complete-limit-s", type=float, default=900.0)
    args = parser.parse_args()
    if args.complete:
        figures = asyncio.run(complete_streams(args.complete, args.complete_events - 2,
                                               args.complete_limit_s))  # fmt: skip
        publish("edge_complete", complete_report(figures, args.complete_limit_s))
        return
    counts = [int(n) for n in args.streams.split(",") if n]  # "": the idle part alone
    text = asyncio.run(run(counts, args.idle, args.rounds, args.against))
    if not counts:  # the idle part alone: the streaming results stay as they are
        publish("edge_idle", text)
        return
    publish("edge", text)
    result = text.rsplit("\n", 1)[1]
    (Path(__file__).parent / "results" / "edge.json").write_text(result + "\n")


if __name__ == "__main__":
    main()
