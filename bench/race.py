"""The race: this platform against peer routers, on the same real engines, the same multi-turn
chat workload and in one run. Its goals: docs/decisions.md, "Performance goals".

Three llama-server replicas (SmolLM2-135M, llama.cpp on this machine's CPU) are started by a
LocalPlatform with three nodeagents; every system in the race routes to those same three
llama-server processes (the URLs in the nodeagents' ready files):

    platform     edge's OpenAI endpoint -> gateway -> scheduler pick -> nodeagent -> engine,
                 with the default output safety hold-back (50 tokens); by default only on
                 the plain workload (--holdback-on), since it changes what the user sees
                 and when, not where a turn runs
    platform-h0  the same scheduler and nodeagents behind a second gateway + edge whose
                 hold-back is off (holdback 0, check every token): the routing alone
    platform-h0-twin  platform-h0 again, a gateway + edge of its own with the same settings:
                 an A/A control, whose difference from platform-h0 is the race's noise
    platform-h0-calls  the same as platform-h0 with a gateway that asks the node to count
                 each prompt (local_token_counts off): that change side by side
    platform-h0-pick-calls  the same with a gateway that asks the scheduler for each pick
                 by call (pick_stream off)
    platform-h0-unvouched  the same with a gateway that fails an answer over after 10 s with
                 no text even while its node vouches for it (node_vouched_stall_timeout_s 10)
    platform-h0-edge-calls  the same with an edge that calls the gateway for each answer
                 instead of opening it on its link (gateway_links 0)
    vllm-router  vllm-router (PyPI, Rust), consistent hashing on the X-Session-Id header
    sglang       sglang-router (PyPI, Rust), cache-aware (prefix tree + load balance)
    round-robin  a minimal aiohttp proxy (in this file), next replica on connect errors
    oracle       the client pins each conversation to hash(conversation) % 3, straight to
                 llama-server: the ceiling for pure affinity (next replica if it is down)

    .venv/bin/python bench/race.py            # the full race, 120 turns a cell, ~30 min on 2 cores
    .venv/bin/python bench/race.py --quick    # a smoke run, ~3 min (race-quick.*)
    --pin-engines       engines on core 0, every router process and the client on core 1
                        (bench/race_pinning.py); --warmup-turns N (4): untimed turns each
                        system serves before its timed ones in every round (race_warmup.py)

Each workload (bench/race_workloads.py) runs in rounds; in each round every system serves the
same users in turn, the order reversed every other round. Every system's run salts its
conversations' first message, so nothing one system cached serves another (the shared system
prompt aside, which all send alike). Churn kills one replica's llama-server (SIGKILL) after a
quarter of the run's turns have finished and starts it again, cold, on the same port after
55 %: the replica that has read the most prompt tokens for that system in the round so far,
the one its routing leans on (`--churn-target last`: always the last replica, as before).
Peers get health checks every second (the nodeagent checks its engine every second too);
clients retry a failed turn twice, as the openai SDK does, and the turn's times count from
its first try.

Prints a table and ends with one JSON line; bench/results/race.txt, race.json and race.png.
The peers live in their own virtualenv (.race/venv) so their pins never touch the project's;
the first run that races them makes it (PEER_PINS, from PyPI, about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

THIS_FILE = Path(__file__).resolve()
REPO = THIS_FILE.parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from benchkit import publish  # noqa: E402
from race_picks import describe, picks_between, scrape_picks  # noqa: E402
from race_pinning import Pinning  # noqa: E402
from race_stats import round_interval  # noqa: E402
from race_warmup import warm_up_system  # noqa: E402
from race_workloads import SYSTEM_PROMPT, WORKLOADS, Shape, UserScript, build, salted  # noqa: E402

RACE_VENV = REPO / ".race" / "venv"
PEER_PINS = ("vllm-router==0.1.17", "sglang-router==0.3.2")
SYSTEMS = ("platform", "platform-h0", "platform-h0-twin", "platform-h0-calls",
           "platform-h0-pick-calls", "platform-h0-unvouched", "platform-h0-edge-calls",
           "vllm-router", "sglang", "round-robin", "oracle")  # fmt: skip
# The platform's systems beside the first gateway and edge: each a gateway + edge of its own
# with these settings, on the same scheduler and nodeagents.
HOLDBACK_OFF = {
    "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
    "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
}
GATEWAY_VARIANTS = {
    "platform-h0": HOLDBACK_OFF,
    # The same settings again: an A/A control, whose difference from platform-h0 is what the
    # race reads as a difference when there is none.
    "platform-h0-twin": HOLDBACK_OFF,
    # The gateway asks the node to count every prompt, as before gateways counted themselves.
    "platform-h0-calls": {**HOLDBACK_OFF, "CHAT_GATEWAY_LOCAL_TOKEN_COUNTS": "false"},
    # The gateway asks the scheduler for each pick by call, as before the held pick stream.
    "platform-h0-pick-calls": {**HOLDBACK_OFF, "CHAT_GATEWAY_PICK_STREAM": "false"},
    # The gateway waits for text no longer than its stall timeout (10 s) whether or not the
    # node vouches for the silence, as before nodes vouched.
    "platform-h0-unvouched": {**HOLDBACK_OFF, "CHAT_GATEWAY_NODE_VOUCHED_STALL_TIMEOUT_S": "10"},
    # The edge calls the gateway for each answer, as before the edge's link.
    "platform-h0-edge-calls": {**HOLDBACK_OFF, "CHAT_EDGE_GATEWAY_LINKS": "0"},
}
# What each variant beside platform-h0 undoes, as its verdict line names it.
VARIANT_CHANGES = {
    "platform-h0-twin": "nothing (an A/A control: the race's own noise)",
    "platform-h0-calls": "counting in the gateway vs asking the node",
    "platform-h0-pick-calls": "picks on the held stream vs a call each",
    "platform-h0-unvouched": "failing over unvouched silence only vs any 10 s of silence",
    "platform-h0-edge-calls": "answers on the edge's link vs a call each",
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MAX_ATTEMPTS = 3  # the openai SDK's default: one try and two retries
RETRY_PAUSE_S = 0.5


# --- measuring -------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (all its threads), from /proc/<pid>/stat."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@dataclass
class Sample:
    system: str
    workload: str
    round: int
    conversation: str
    turn: int
    ok: bool
    attempts: int
    ttft_s: float
    e2e_s: float
    output_tokens: int
    prompt_tokens: int
    cached_tokens: int
    replica: str
    error: str = ""


@dataclass
class RunCost:
    wall_s: float = 0.0
    cpu_s: float = 0.0  # every router process of the system
    cpu_core_s: float = 0.0  # the platform's gateway + scheduler only
    requests: int = 0
    prefilled: list[float] = field(default_factory=list)  # per replica, from /metrics
    idle_cpu_s: float = 0.0  # what the same processes burn idle over as long
    idle_core_s: float = 0.0
    by_part: dict[str, float] = field(default_factory=dict)  # the platform's, per process kind
    picks: dict[str, float] | None = None  # the platform's, by reason (race_picks.py)
    warmup_turns: int = 0
    load_reports: float | None = None  # the nodes' reports to the scheduler over the run


# --- the systems -----------------------------------------------------------------------------


@dataclass
class System:
    name: str
    url: str  # base URL of the OpenAI API; the oracle has one per replica instead
    model: str = "small"
    token: str = ""
    cpu_pids: list[int] = field(default_factory=list)
    core_pids: list[int] = field(default_factory=list)
    replicas: list[str] = field(default_factory=list)
    # The platform's processes by kind (edge, gateway, scheduler, nodeagents): where its CPU goes.
    parts: dict[str, list[int]] = field(default_factory=dict)
    idle_cpu_per_s: float = 0.0  # what its processes burn with no request in flight
    idle_core_per_s: float = 0.0
    scheduler_metrics: str = ""  # the platform's scheduler's /metrics URL: picks by reason

    def target(self, conversation: str, attempt: int) -> str:
        if self.name != "oracle":
            return self.url
        digest = hashlib.sha256(conversation.encode()).digest()
        pin = int.from_bytes(digest[:8], "big") % len(self.replicas)
        return self.replicas[(pin + attempt) % len(self.replicas)]

    def headers(self, conversation: str) -> dict[str, str]:
        headers = {"X-Session-Id": conversation, "Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


class TurnFailed(Exception):
    pass


async def one_try(
    http: aiohttp.ClientSession, system: System, conversation: str, attempt: int, body: dict
) -> tuple[float | None, str, dict, str]:
    """(first-token time, answer text, usage, replica) of one streamed completion."""
    first = None
    texts: list[str] = []
    usage: dict = {}
    finished = False
    url = system.target(conversation, attempt) + "/v1/chat/completions"
    async with http.post(url, json=body, headers=system.headers(conversation)) as response:
        if response.status != 200:
            raise TurnFailed(f"HTTP {response.status}: {(await response.text())[:120]}")
        replica = response.headers.get("X-Replica", "")
        async for raw in response.content:
            if not raw.startswith(b"data: {"):
                continue
            event = json.loads(raw[6:])
            if "error" in event:
                raise TurnFailed(f"stream error: {str(event['error'])[:120]}")
            if event.get("model") == "busy":
                raise TurnFailed("the platform composed a busy answer")
            for choice in event.get("choices") or ():
                text = (choice.get("delta") or {}).get("content")
                if text:
                    if first is None:
                        first = time.perf_counter()
                    texts.append(text)
                if choice.get("finish_reason"):
                    finished = True
            if event.get("usage"):
                usage = event["usage"]
    if not finished:
        raise TurnFailed("the stream ended without a finish")
    return first, "".join(texts), usage, replica


async def one_turn(
    http: aiohttp.ClientSession,
    system: System,
    workload: str,
    round_index: int,
    conversation: str,
    turn: int,
    messages: list[dict],
    max_tokens: int,
) -> tuple[Sample, str]:
    body = {
        "model": system.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    error = ""
    for attempt in range(MAX_ATTEMPTS):
        if attempt:
            await asyncio.sleep(RETRY_PAUSE_S)
        try:
            first, text, usage, replica = await one_try(http, system, conversation, attempt, body)
        except (aiohttp.ClientError, TimeoutError, TurnFailed, json.JSONDecodeError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:160]
            continue
        end = time.perf_counter()
        details = usage.get("prompt_tokens_details") or {}
        sample = Sample(
            system.name, workload, round_index, conversation, turn, True, attempt + 1,
            (first or end) - start, end - start, int(usage.get("completion_tokens", 0)),
            int(usage.get("prompt_tokens", 0)), int(details.get("cached_tokens", 0)), replica,
            error,  # why the try before failed, when one did
        )  # fmt: skip
        return sample, text
    end = time.perf_counter()
    failed = Sample(system.name, workload, round_index, conversation, turn, False, MAX_ATTEMPTS,
                    end - start, end - start, 0, 0, 0, "", error)  # fmt: skip
    return failed, "(no answer)"


# --- churn -----------------------------------------------------------------------------------


class Churn:
    """Kills one replica's llama-server and starts the same command again on the same port:
    the replica leaves and comes back with an empty cache.

    Which replica: with `busiest` (the default), the one that has read the most prompt tokens
    for this system so far in the round, the one its routing leans on; a router that sends
    everything to one replica cannot sit the churn out on the others. With `last`, always
    the last replica, as the race did before (the same process for every system at once).

    UNFINISHED: "another joins" is this same replica rejoining cold at its old address; a
    fourth replica at a new address joining mid-run would need every peer's worker-add API
    (vllm-router's and sglang-router's differ) and a fourth engine on two cores."""

    def __init__(
        self,
        nodeagent_pids: list[int],
        engine_urls: list[str],
        log_dir: Path,
        on_start=lambda: None,
        target: str = "busiest",
    ) -> None:
        self._nodeagent_pids = nodeagent_pids
        self._on_start = on_start  # told once the new process exists (the pinning's sweep)
        self.engine_urls = engine_urls
        self._log_dir = log_dir
        self._target = target
        # Replicas this churn started again, by index: their llama-server is its child now.
        self._restarted: dict[int, asyncio.subprocess.Process] = {}
        self._killed: int | None = None
        self._argv: dict[int, list[str]] = {}
        self._env: dict[int, dict[str, str]] = {}
        self.events: list[str] = []

    def choose(self, prefilled: list[float]) -> int:
        """The replica to kill, given each one's prompt tokens read so far in this round."""
        if self._target == "last":
            return len(self.engine_urls) - 1
        return max(range(len(prefilled)), key=prefilled.__getitem__)

    def _find(self, index: int) -> int:
        if index in self._restarted:
            return self._restarted[index].pid
        for pid in children_of(self._nodeagent_pids[index]):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"llama-server"):
                self._argv[index] = [a.decode() for a in argv if a]
                raw_env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                self._env[index] = dict(e.decode().split("=", 1) for e in raw_env if b"=" in e)
                return pid
        raise RuntimeError(f"no llama-server under nodeagent {self._nodeagent_pids[index]}")

    async def kill(self, at: float, index: int) -> None:
        pid = self._find(index)
        os.kill(pid, signal.SIGKILL)
        if index in self._restarted:
            await self._restarted.pop(index).wait()
        self._killed = index
        self.events.append(f"killed {self.engine_urls[index]} at {at:.1f}s")

    async def restart(self, at: float) -> None:
        from infra.process import dies_with_parent

        index = self._killed
        if index is None:
            return
        self._killed = None
        url = self.engine_urls[index]
        log = await asyncio.to_thread(open, self._log_dir / "churn-llama-server.log", "ab")
        self._restarted[index] = await asyncio.create_subprocess_exec(
            *dies_with_parent(self._argv[index]), env=self._env[index], stdout=log, stderr=log
        )
        log.close()
        self._on_start()
        started = time.perf_counter()
        async with aiohttp.ClientSession() as http:
            while time.perf_counter() - started < 60:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(url + "/health") as response:
                        if response.status == 200:
                            break
                await asyncio.sleep(0.1)
        self.events.append(
            f"restarted at {at:.1f}s, healthy {time.perf_counter() - started:.1f}s later"
        )

    async def close(self) -> None:
        for process in self._restarted.values():
            if process.returncode is None:
                process.kill()
                await process.wait()


# --- one system, one round -------------------------------------------------------------------


async def prefilled_tokens(http: aiohttp.ClientSession, engines: list[str]) -> list[float]:
    """Each replica's prompt tokens processed so far (cached ones excluded), from /metrics."""
    counts = []
    for url in engines:
        value = 0.0
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with http.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
                match = re.search(r"^llamacpp:prompt_tokens_total (\S+)$", await r.text(), re.M)
                value = float(match.group(1)) if match else 0.0
        counts.append(value)
    return counts


async def run_round(
    system: System,
    workload: str,
    round_index: int,
    scripts: list[UserScript],
    max_tokens: int,
    engines: list[str],
    churn: Churn | None,
    warmup_turns: int = 0,
) -> tuple[list[Sample], RunCost]:
    salt = hashlib.sha256(f"{system.name}/{workload}/{round_index}".encode()).hexdigest()[:8]
    total = sum(len(c.messages) for s in scripts for c in s.conversations)
    samples: list[Sample] = []
    progress = asyncio.Condition()
    timeout = aiohttp.ClientTimeout(total=300, sock_read=120)
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:

        async def untimed(conversation: str, turn: int, messages: list[dict]) -> str:
            _, text = await one_turn(http, system, workload, round_index, conversation, turn,
                                     messages, max_tokens)  # fmt: skip
            return text

        warmed = await warm_up_system(system.name, workload, round_index, warmup_turns, untimed)
        picks0, reports0 = await scrape_picks(http, system.scheduler_metrics)
        before_prefill = await prefilled_tokens(http, engines)
        cpu0 = sum(cpu_seconds(p) for p in system.cpu_pids)
        core0 = sum(cpu_seconds(p) for p in system.core_pids)
        parts0 = {k: sum(map(cpu_seconds, pids)) for k, pids in system.parts.items()}
        start = time.perf_counter()

        async def user(script: UserScript) -> None:
            await asyncio.sleep(script.start_s)
            for conversation in script.conversations:
                messages = [{"role": "system", "content": SYSTEM_PROMPT}]
                for turn, text in enumerate(conversation.messages):
                    content = salted(text, salt) if turn == 0 else text
                    messages.append({"role": "user", "content": content})
                    sample, answer = await one_turn(
                        http, system, workload, round_index, conversation.conversation_id,
                        turn, messages, max_tokens,
                    )  # fmt: skip
                    messages.append({"role": "assistant", "content": answer})
                    async with progress:
                        samples.append(sample)
                        progress.notify_all()
                    await asyncio.sleep(conversation.think_s[turn])

        async def churn_events() -> None:
            assert churn is not None
            async with progress:
                await progress.wait_for(lambda: len(samples) >= total * 0.25)
            now_prefill = await prefilled_tokens(http, engines)
            read = [a - b if a >= b else a
                    for a, b in zip(now_prefill, before_prefill, strict=True)]  # fmt: skip
            await churn.kill(time.perf_counter() - start, churn.choose(read))
            async with progress:
                await progress.wait_for(lambda: len(samples) >= total * 0.55)
            await churn.restart(time.perf_counter() - start)

        chaos = asyncio.create_task(churn_events()) if churn else None
        try:
            await asyncio.gather(*(user(s) for s in scripts))
            wall = time.perf_counter() - start
            cpu = sum(cpu_seconds(p) for p in system.cpu_pids) - cpu0
            core = sum(cpu_seconds(p) for p in system.core_pids) - core0
            by_part = {k: sum(map(cpu_seconds, system.parts[k])) - v for k, v in parts0.items()}
            if chaos is not None:
                await chaos  # the replica is back before the next system starts
        finally:
            if chaos is not None and not chaos.done():
                chaos.cancel()
        after_prefill = await prefilled_tokens(http, engines)
        picks1, reports1 = await scrape_picks(http, system.scheduler_metrics)
        picks = picks_between(picks0, picks1)
        reports = reports1 - reports0 if reports0 is not None and reports1 is not None else None
    # A restarted replica counts from zero again.
    prefilled = [a - b if a >= b else a for a, b in zip(after_prefill, before_prefill, strict=True)]
    cost = RunCost(wall, cpu, core, len(samples), prefilled,
                   system.idle_cpu_per_s * wall, system.idle_core_per_s * wall,
                   by_part, picks, warmed, reports)  # fmt: skip
    return samples, cost


# --- the round-robin proxy (its own process, so its CPU is measured like the others') -----------


def serve_round_robin(port: int, upstreams: list[str]) -> None:
    state = {"next": 0}
    hop_by_hop = {"content-length", "transfer-encoding", "connection", "keep-alive"}

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        http: aiohttp.ClientSession = request.app["http"]
        first = state["next"]
        state["next"] += 1
        for offset in range(len(upstreams)):  # next upstream on a connect error, as nginx does
            upstream = upstreams[(first + offset) % len(upstreams)]
            try:
                upstream_response = await http.post(
                    upstream + request.path, data=body,
                    headers={"Content-Type": request.headers.get("Content-Type", "")},
                )  # fmt: skip
            except aiohttp.ClientConnectorError:
                continue
            async with upstream_response:
                response = web.StreamResponse(
                    status=upstream_response.status,
                    headers={
                        k: v for k, v in upstream_response.headers.items()
                        if k.lower() not in hop_by_hop
                    },
                )  # fmt: skip
                await response.prepare(request)
                with contextlib.suppress(aiohttp.ClientError):
                    async for chunk in upstream_response.content.iter_any():
                        await response.write(chunk)
                await response.write_eof()
                return response
        return web.json_response({"error": {"message": "no upstream reachable"}}, status=502)

    async def start(app: web.Application) -> None:
        app["http"] = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=None),
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
        )

    async def stop(app: web.Application) -> None:
        await app["http"].close()

    app = web.Application(client_max_size=16 * 1024 * 1024)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/health", health)
    app.router.add_post("/v1/chat/completions", proxy)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --- starting everything ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_healthy(
    url: str, name: str, process: asyncio.subprocess.Process, timeout_s: float = 90.0
) -> None:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline and process.returncode is None:
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with http.get(url + "/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise RuntimeError(f"{name} ({url}) did not become healthy; see .race/state/*.log")


async def spawn(argv: list[str], log: Path) -> asyncio.subprocess.Process:
    from infra.process import dies_with_parent

    out = await asyncio.to_thread(open, log, "ab")
    process = await asyncio.create_subprocess_exec(*dies_with_parent(argv), stdout=out, stderr=out)
    out.close()
    return process


async def start_peers(
    engines: list[str], state: Path, names: list[str], processes: list[asyncio.subprocess.Process]
) -> dict[str, System]:
    """Starts the peer routers (appended to processes, for the caller to stop)."""
    systems: dict[str, System] = {}
    # Health every second, out after one failed check, back after one good one: as quick to
    # see a replica go and come back as the nodeagent (which checks its engine every second).
    health = ["--health-check-interval-secs", "1", "--health-failure-threshold", "1",
              "--health-success-threshold", "1"]  # fmt: skip
    if "vllm-router" in names:
        port = free_port()
        argv = [str(RACE_VENV / "bin" / "vllm-router"), "--host", "127.0.0.1", "--port",
                str(port), "--worker-urls", *engines, "--policy", "consistent_hash",
                "--prometheus-port", str(free_port()), "--log-level", "warning",
                *health]  # fmt: skip
        processes.append(await spawn(argv, state / "vllm-router.log"))
        systems["vllm-router"] = System("vllm-router", f"http://127.0.0.1:{port}")
    if "sglang" in names:
        port = free_port()
        argv = [str(RACE_VENV / "bin" / "sglang-router"), "launch", "--host", "127.0.0.1",
                "--port", str(port), "--worker-urls", *engines, "--policy", "cache_aware",
                "--prometheus-port", str(free_port()), "--log-level", "warn",
                *health]  # fmt: skip
        processes.append(await spawn(argv, state / "sglang-router.log"))
        systems["sglang"] = System("sglang", f"http://127.0.0.1:{port}")
    if "round-robin" in names:
        port = free_port()
        argv = [sys.executable, str(THIS_FILE), "--serve-round-robin",
                str(port), *engines]  # fmt: skip
        processes.append(await spawn(argv, state / "round-robin.log"))
        systems["round-robin"] = System("round-robin", f"http://127.0.0.1:{port}")
    for system, process in zip(systems.values(), processes, strict=True):
        await wait_healthy(system.url, system.name, process)
        # The launcher may hand over to a child; count every process it started.
        system.cpu_pids = [process.pid, *children_of(process.pid)]
    return systems


def setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.startswith("CHAT_"):
        raise argparse.ArgumentTypeError(f"a setting is CHAT_NAME=VALUE, not {text!r}")
    return name, value


def make_platform(
    state: Path,
    engine_threads: int,
    max_tokens: int,
    prefill_tokens_per_s: float,
    settings: dict[str, str],
):
    from clients.chatctl.platform import LocalPlatform, PlatformSettings

    class RacePlatform(LocalPlatform):
        def _node_env(self, index: int) -> dict[str, str]:
            env = super()._node_env(index)
            # Three engines share this machine's cores; more threads than cores only spin.
            env["CHAT_NODEAGENT_THREADS"] = str(engine_threads)
            return env

    quiet = {f"CHAT_{s}_LOG_LEVEL": "warning" for s in ("GATEWAY", "EDGE", "SCHEDULER",
                                                         "NODEAGENT")}  # fmt: skip
    return RacePlatform(
        PlatformSettings(
            state_dir=state,
            edge_listen="127.0.0.1:0",
            nodes=3,
            parallel=2,
            slot_context_tokens=8192,
            startup_timeout_s=240.0,
            extra_env={
                "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e12",
                "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
                "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "10000",
                "CHAT_EDGE_MAX_REQUESTS_PER_IP": "0",
                # As an operator sets it for this engine and workload: an answer holds its
                # slot for about max_tokens at 25 tokens/s (the scheduler's default, 13 s, is a
                # 400-token chat answer on a GPU).
                "CHAT_SCHEDULER_ANSWER_HOLD_S": str(round(max_tokens / 25, 2)),
                # And the engines' prompt reading speed (the default, 2,000 tokens/s, is a GPU's):
                # what moving a conversation off its cache costs is judged by it.
                **(
                    {"CHAT_SCHEDULER_PREFILL_TOKENS_PER_S": str(prefill_tokens_per_s)}
                    if prefill_tokens_per_s > 0
                    else {}
                ),
                **quiet,
                **settings,
            },
        )
    )


async def platform_systems(platform, state: Path, names: list[str]) -> dict[str, System]:
    """The platform as one system per gateway setting; both share scheduler and nodeagents."""
    by_name = {c.name: c for c in platform.children}
    nodeagents = [c for c in platform.children if c.name.startswith("nodeagent")]
    shared = [by_name["scheduler"].process.pid] + [c.process.pid for c in nodeagents]
    scheduler_metrics = f"http://127.0.0.1:{by_name['scheduler'].ready['metrics']}/metrics"

    def parts(edge: int, gateway: int) -> dict[str, list[int]]:
        return {
            "edge": [edge],
            "gateway": [gateway],
            "scheduler": [by_name["scheduler"].process.pid],
            "nodeagents": [c.process.pid for c in nodeagents],
        }

    systems = {}
    if "platform" in names:
        systems["platform"] = System(
            "platform", platform.edge_url, token=platform.tokens["plus"],
            cpu_pids=[by_name["edge"].process.pid, by_name["gateway"].process.pid, *shared],
            core_pids=[by_name["gateway"].process.pid, by_name["scheduler"].process.pid],
            parts=parts(by_name["edge"].process.pid, by_name["gateway"].process.pid),
            scheduler_metrics=scheduler_metrics,
        )  # fmt: skip
    for name, settings in GATEWAY_VARIANTS.items():
        if name not in names:
            continue
        suffix = name.removeprefix("platform")
        store_url = f"sqlite:///{state / 'chat.db'}"
        env = {**platform._gateway_env(f"gateway{suffix}", store_url), **settings}
        await platform._spawn(f"gateway{suffix}", "gateway.main", env)
        gateway = platform._child(f"gateway{suffix}")
        await platform._spawn(
            f"edge{suffix}", "edge.main",
            {**platform._edge_env(f"edge{suffix}"), "CHAT_EDGE_LISTEN": "127.0.0.1:0",
             "CHAT_EDGE_GATEWAY_ADDRESSES": str(gateway.ready["grpc"]),
             **{key: value for key, value in settings.items() if key.startswith("CHAT_EDGE_")}},
        )  # fmt: skip
        edge = platform._child(f"edge{suffix}")
        systems[name] = System(
            name, str(edge.ready["http"]), token=platform.tokens["plus"],
            cpu_pids=[edge.process.pid, gateway.process.pid, *shared],
            core_pids=[gateway.process.pid, by_name["scheduler"].process.pid],
            parts=parts(edge.process.pid, gateway.process.pid),
            scheduler_metrics=scheduler_metrics,
        )  # fmt: skip
    return systems


async def warm_up(engines: list[str], max_tokens: int) -> None:
    body = {
        "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                     {"role": "user", "content": "Say hello."}],
        "max_tokens": max_tokens, "stream": False,
    }  # fmt: skip
    async with aiohttp.ClientSession() as http:
        for url in engines:
            async with http.post(url + "/v1/chat/completions", json=body) as response:
                await response.read()


async def measure_idle(systems: list[System], seconds: float) -> None:
    """Every system's CPU while nothing is asked of any: load reports, health checks, timers."""
    before = [(sum(map(cpu_seconds, s.cpu_pids)), sum(map(cpu_seconds, s.core_pids)))
              for s in systems]  # fmt: skip
    await asyncio.sleep(seconds)
    for system, (cpu, core) in zip(systems, before, strict=True):
        system.idle_cpu_per_s = (sum(map(cpu_seconds, system.cpu_pids)) - cpu) / seconds
        system.idle_core_per_s = (sum(map(cpu_seconds, system.core_pids)) - core) / seconds


# --- the race --------------------------------------------------------------------------------


def order_for(systems: list[str], round_index: int, workload_index: int) -> list[str]:
    """Forward, then reversed, alternating by round and by workload."""
    return systems if (round_index + workload_index) % 2 == 0 else list(reversed(systems))


async def race(args: argparse.Namespace) -> dict:
    names = [s for s in SYSTEMS if s in args.systems]
    shape = Shape(users=args.users, conversations=args.conversations, turns=args.turns,
                  think_s=args.think_s, paste_tokens=args.paste_tokens)  # fmt: skip
    samples: list[Sample] = []
    costs: dict[tuple[str, str], list[RunCost]] = {}
    churn_log: list[str] = []
    started = time.perf_counter()
    # Logs and the platform's state stay in .race/state after the run, for a look afterwards.
    state = REPO / ".race" / "state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    platform = make_platform(state, args.engine_threads, args.max_tokens,
                             args.prefill_tokens_per_s, dict(args.setting))  # fmt: skip
    peers: list[asyncio.subprocess.Process] = []
    churn: Churn | None = None
    systems: dict[str, System] = {}
    pinning = Pinning(args.pin_engines)
    pinning.check()
    pinning.pin_self()  # before anything starts: every child begins on the routers' core
    try:
        await platform.start()
        nodeagents = [c for c in platform.children if c.name.startswith("nodeagent")]
        engines = [str(c.ready["engine_url"]) for c in nodeagents]
        systems.update(await platform_systems(platform, state, names))
        systems.update(await start_peers(engines, state, names, peers))
        if "oracle" in names:
            systems["oracle"] = System("oracle", "", replicas=engines)
        churn = Churn([c.process.pid for c in nodeagents], engines, state, pinning.sweep,
                      args.churn_target)  # fmt: skip
        pinning.sweep()
        pinning.start()
        await warm_up(engines, args.max_tokens)
        await measure_idle(list(systems.values()), 5.0)
        print(f"up in {time.perf_counter() - started:.0f}s; engines {engines}", flush=True)
        for w, workload in enumerate(args.workloads):
            for r in range(args.rounds):
                scripts = build(workload, shape, args.seed, r)
                # The hold-back changes what the user sees, not where a turn runs: the platform
                # with it runs only on the workloads named (time is short on two cores).
                racing = [n for n in names if n != "platform" or workload in args.holdback_on]
                for name in order_for(racing, r, w):
                    got, cost = await run_round(
                        systems[name], workload, r, scripts, args.max_tokens, engines,
                        churn if workload == "churn" else None, args.warmup_turns,
                    )  # fmt: skip
                    samples.extend(got)
                    costs.setdefault((workload, name), []).append(cost)
                    if workload == "churn":
                        churn_log.append(f"{name} r{r}: " + "; ".join(churn.events))
                        churn.events.clear()
                    failed = sum(not s.ok for s in got)
                    print(f"  {workload:<7} r{r} {name:<12} {cost.wall_s:6.1f}s "
                          f"{len(got)} turns, {failed} failed", flush=True)  # fmt: skip
    finally:
        await pinning.stop()
        if churn is not None:
            await churn.close()
        for process in peers:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 10)
                except TimeoutError:
                    process.kill()
                    await process.wait()
        await platform.stop()
    return {
        "samples": samples,
        "costs": costs,
        "churn": churn_log,
        "idle": {n: s.idle_cpu_per_s for n, s in systems.items() if n != "oracle"},
        "total_s": time.perf_counter() - started,
        "pinning": pinning.header(),
    }


def summarise(samples: list[Sample], costs: dict, workloads: list[str], names: list[str]):
    rows = {}
    for workload in workloads:
        for name in names:
            mine = [s for s in samples if s.workload == workload and s.system == name]
            if not mine:
                continue
            good = [s for s in mine if s.ok]
            ttft = [s.ttft_s * 1000 for s in good]
            e2e = [s.e2e_s * 1000 for s in good]
            runs = costs[(workload, name)]
            wall = sum(c.wall_s for c in runs)
            requests = sum(c.requests for c in runs)
            prompt = sum(s.prompt_tokens for s in good)
            prefilled = [sum(col) for col in zip(*(c.prefilled for c in runs), strict=True)]
            mean_prefill = sum(prefilled) / len(prefilled) if prefilled else 0.0
            # Of the turns after a conversation's first, how many stayed on the replica of the
            # turn before (only where the system names the replica: platform and oracle).
            stays = moves = 0
            by_conv: dict[tuple[int, str], str] = {}
            for s in sorted(good, key=lambda s: (s.round, s.conversation, s.turn)):
                replica = s.replica or (
                    "pin" if name == "oracle" and s.attempts == 1 else ""
                )  # the oracle's first try always goes to the pinned replica
                key = (s.round, s.conversation)
                if replica and key in by_conv:
                    stays += by_conv[key] == replica
                    moves += by_conv[key] != replica
                if replica:
                    by_conv[key] = replica
            rows[(workload, name)] = {
                "by_round": by_round(good),
                "turns": len(mine),
                "failed": len(mine) - len(good),
                "retried": sum(s.attempts > 1 for s in mine),
                "ttft_p50_ms": pct(ttft, 0.5),
                "ttft_p95_ms": pct(ttft, 0.95),
                "e2e_p50_ms": pct(e2e, 0.5),
                "e2e_p95_ms": pct(e2e, 0.95),
                "output_tokens_per_s": sum(s.output_tokens for s in good) / wall if wall else 0,
                "cached_share": sum(s.cached_tokens for s in good) / prompt if prompt else 0.0,
                **answer_shape(good),
                "router_cpu_ms_per_request": (
                    1000 * sum(c.cpu_s for c in runs) / requests
                    if requests and name != "oracle"
                    else None  # the oracle has no router
                ),
                "gateway_scheduler_cpu_ms_per_request": (
                    1000 * sum(c.cpu_core_s for c in runs) / requests
                    if name.startswith("platform")
                    else None
                ),
                "router_cpu_ms_per_request_over_idle": (
                    1000 * sum(c.cpu_s - c.idle_cpu_s for c in runs) / requests
                    if requests and name != "oracle"
                    else None
                ),
                "gateway_scheduler_cpu_ms_per_request_over_idle": (
                    1000 * sum(c.cpu_core_s - c.idle_core_s for c in runs) / requests
                    if name.startswith("platform")
                    else None
                ),
                "cpu_ms_per_request_by_process": (
                    {
                        part: 1000 * sum(c.by_part.get(part, 0.0) for c in runs) / requests
                        for part in runs[0].by_part
                    }
                    if requests and runs[0].by_part
                    else None
                ),
                "prefill_hot_spot": max(prefilled) / mean_prefill if mean_prefill else 0.0,
                "stayed_share": stays / (stays + moves) if stays + moves else None,
                "picks_by_reason": summed_picks(runs),
                "load_reports_per_turn": (
                    sum(c.load_reports or 0.0 for c in runs) / requests
                    if requests and all(c.load_reports is not None for c in runs)
                    else None
                ),
                "warmup_turns": sum(c.warmup_turns for c in runs),
                "wall_s": wall,
            }
    return rows


def answer_shape(good: list[Sample]) -> dict[str, float]:
    """What each turn cost the engines and how fast its answer came once begun: on cores the
    engines share, a system that starts answers sooner runs more at once, and each decodes
    slower (E2E p50 alone does not tell the two apart)."""
    decoding = [(s.output_tokens - 1) / (s.e2e_s - s.ttft_s) for s in good
                if s.output_tokens > 1 and s.e2e_s > s.ttft_s]  # fmt: skip
    n = len(good) or 1
    return {
        "uncached_prompt_tokens": sum(s.prompt_tokens - s.cached_tokens for s in good) / n,
        "e2e_mean_ms": 1000 * sum(s.e2e_s for s in good) / n,
        "decode_tokens_per_s_p50": pct(decoding, 0.5) if decoding else 0.0,
    }


def summed_picks(runs: list[RunCost]) -> dict[str, float] | None:
    """The runs' picks by reason, added up; None when no run could read them."""
    read = [c.picks for c in runs if c.picks is not None]
    if not read:
        return None
    return {r: sum(p.get(r, 0.0) for p in read) for r in sorted({r for p in read for r in p})}


# The latency figures whose spread across rounds is printed and read by the verdicts.
LATENCY = {"ttft_p50_ms": ("ttft_s", 0.5), "ttft_p95_ms": ("ttft_s", 0.95),
           "e2e_p50_ms": ("e2e_s", 0.5), "e2e_p95_ms": ("e2e_s", 0.95)}  # fmt: skip


def by_round(good: list[Sample]) -> dict[str, list[float]]:
    """Each latency figure per round (rounds in order): every system serves the same scripts
    in a round, so two systems' figures of one round are a pair."""
    rounds = sorted({s.round for s in good})
    return {
        metric: [round(pct([getattr(s, field) * 1000 for s in good if s.round == r], q), 1)
                 for r in rounds]
        for metric, (field, q) in LATENCY.items()
    }  # fmt: skip


def against(mine: dict, theirs: dict, metric: str) -> str:
    """mine against theirs on one figure, over the whole run and round by round. With three
    rounds or more, the 90 % interval of the rounds' mean ratio decides: a difference whose
    interval holds zero is inside the noise. With two, a difference whose sign the rounds
    do not agree on is."""
    whole = mine[metric] / theirs[metric] - 1
    pairs = list(zip(mine["by_round"][metric], theirs["by_round"][metric], strict=False))
    each = [a / b - 1 for a, b in pairs if b]
    rounds = ", ".join(f"r{i} {d:+.0%}" for i, d in enumerate(each))
    interval = round_interval(each)
    if interval is not None:
        mean, low, high = interval
        resolved = "resolved" if low > 0 or high < 0 else "inside the noise"
        return (f"{metric} {whole:+.1%} ({rounds}; round mean {mean:+.1%}, 90 % interval "
                f"{low:+.1%} to {high:+.1%}: {resolved})")  # fmt: skip
    agree = len(each) > 1 and (all(d > 0 for d in each) or all(d < 0 for d in each))
    noise = "the rounds agree" if agree else "inside the noise: the rounds disagree"
    if len(each) < 2:
        noise = "one round: no spread to judge the noise by"
    return f"{metric} {whole:+.1%} ({rounds}; {noise})"


def fmt(value: float | None, spec: str) -> str:
    if value is None or value != value:
        return "-"
    return format(value, spec)


def verdicts(rows: dict, workloads: list[str]) -> list[str]:
    """What the numbers say against the race's goals (docs/decisions.md, "Performance goals");
    computed, never assumed."""
    lines = []
    us = "platform-h0" if any(k[1] == "platform-h0" for k in rows) else "platform"
    peers = [p for p in ("vllm-router", "sglang", "round-robin") if any(k[1] == p for k in rows)]
    if ("plain", us) in rows and ("plain", "oracle") in rows:
        a, o = rows[("plain", us)], rows[("plain", "oracle")]
        for metric in ("ttft_p50_ms", "e2e_p50_ms"):
            ratio = a[metric] / o[metric] - 1
            lines.append(f"plain: {us} {against(a, o, metric)} against the oracle "
                         f"({'within' if ratio <= 0.05 else 'outside'} the 5 % goal)")  # fmt: skip
    for workload in ("skewed", "churn"):
        if (workload, us) not in rows or workload not in workloads:
            continue
        a = rows[(workload, us)]
        for peer in peers:
            if (workload, peer) not in rows:
                continue
            p = rows[(workload, peer)]
            ahead = a["ttft_p95_ms"] < p["ttft_p95_ms"] and a["e2e_p50_ms"] < p["e2e_p50_ms"]
            verdict = "ahead" if ahead else "NOT ahead"
            lines.append(f"{workload}: {us} vs {peer}: {verdict} on TTFT p95 and E2E p50")
            lines.extend(f"  {against(a, p, metric)}"
                         for metric in ("ttft_p95_ms", "e2e_p50_ms", "e2e_p95_ms"))  # fmt: skip

    for workload in workloads:
        if (workload, "platform") in rows and (workload, "platform-h0") in rows:
            held, off = rows[(workload, "platform")], rows[(workload, "platform-h0")]
            lines.append(
                f"{workload}: the output hold-back costs TTFT p50 "
                f"{held['ttft_p50_ms'] - off['ttft_p50_ms']:+.0f} ms, E2E p50 "
                f"{held['e2e_p50_ms'] - off['e2e_p50_ms']:+.0f} ms (platform vs platform-h0)"
            )

    for workload in workloads:
        for variant, change in VARIANT_CHANGES.items():
            if (workload, "platform-h0") not in rows or (workload, variant) not in rows:
                continue
            here, other = rows[(workload, "platform-h0")], rows[(workload, variant)]
            by_process = ", ".join(
                f"{part} {here['cpu_ms_per_request_by_process'][part]:.1f}/"
                f"{other['cpu_ms_per_request_by_process'][part]:.1f}"
                for part in here["cpu_ms_per_request_by_process"]
            )
            lines.append(
                f"{workload}: {change} (platform-h0 vs {variant}): CPU/turn "
                f"{here['router_cpu_ms_per_request']:.1f} vs "
                f"{other['router_cpu_ms_per_request']:.1f} ms ({by_process})"
            )
            lines.extend(f"  {against(here, other, metric)}"
                         for metric in ("ttft_p50_ms", "ttft_p95_ms", "e2e_p50_ms"))  # fmt: skip

    def mean(key: str, system: str) -> float | None:
        values = [v[key] for k, v in rows.items() if k[1] == system and v[key] is not None]
        return sum(values) / len(values) if values else None

    rust = {p: mean("router_cpu_ms_per_request", p) for p in ("vllm-router", "sglang")}
    rust = {p: v for p, v in rust.items() if v}
    if rust and mean("router_cpu_ms_per_request", us) is not None:
        fastest = min(rust, key=rust.__getitem__)
        base, base_idle = rust[fastest], mean("router_cpu_ms_per_request_over_idle", fastest)
        for label, key, ref in (
            ("whole platform path", "router_cpu_ms_per_request", base),
            ("whole platform path less idle", "router_cpu_ms_per_request_over_idle", base_idle),
            ("gateway+scheduler", "gateway_scheduler_cpu_ms_per_request", base),
            ("gateway+scheduler less idle", "gateway_scheduler_cpu_ms_per_request_over_idle",
             base_idle),
        ):  # fmt: skip
            ours = mean(key, us)
            if ours is None or ref is None:
                continue
            # /proc counts CPU in clock ticks (10 ms): a ratio to a figure under 1 ms per
            # request over this many requests would be mostly rounding.
            ratio = f"= {ours / ref:.1f}x" if ref >= 1.0 else "(too small to divide by)"
            lines.append(
                f"router CPU/request, {label}: {us} {ours:.2f} ms against "
                f"{fastest} {ref:.2f} ms {ratio} (goal: within 2x)"
            )
    return lines


def plot(rows: dict, workloads: list[str], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("TTFT ms (bar p50, tick p95)", "ttft_p50_ms", "ttft_p95_ms"),
        ("end-to-end ms (bar p50, tick p95)", "e2e_p50_ms", "e2e_p95_ms"),
        ("cached prompt-token share", "cached_share", None),
        ("router CPU ms per request (log scale)", "router_cpu_ms_per_request", None),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(13, 8))
    width = 0.8 / max(1, len(names))
    for ax, (title, key, tick) in zip(axes.flat, panels, strict=True):
        for i, name in enumerate(names):
            xs, ys, ts = [], [], []
            for w, workload in enumerate(workloads):
                row = rows.get((workload, name))
                if row is None or row[key] is None:
                    continue
                xs.append(w + i * width)
                ys.append(row[key])
                ts.append(row[tick] if tick else None)
            ax.bar(xs, ys, width, label=name)
            if tick:
                ax.scatter(xs, ts, marker="_", color="black", s=120, zorder=3)
        ax.set_xticks([w + width * (len(names) - 1) / 2 for w in range(len(workloads))])
        ax.set_xticklabels(workloads)
        ax.set_title(title)
        if key == "router_cpu_ms_per_request":
            ax.set_yscale("log")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("race: 3 llama.cpp replicas (SmolLM2-135M), same workload, one run")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def tree_state() -> str:
    """The commit the race ran on, and whether the tree had edits on top (read-only git)."""
    import subprocess

    def git(*argv: str) -> str:
        done = subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()

    edited = len(git("status", "--porcelain", "--untracked-files=no").splitlines())
    return f"{git('rev-parse', '--short', 'HEAD') or '?'} ({edited} files edited on top)"


def make_peer_venv() -> None:
    """The peers' own virtualenv with their pinned routers, made once; exits with pip's
    reason when they cannot be installed."""
    wanted = [RACE_VENV / "bin" / name for name in ("vllm-router", "sglang-router")]
    if all(path.exists() for path in wanted):
        return
    print(f"race: installing {', '.join(PEER_PINS)} into {RACE_VENV}", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(RACE_VENV)], check=True)
        subprocess.run([str(RACE_VENV / "bin" / "pip"), "install", "--quiet", *PEER_PINS],
                       check=True)  # fmt: skip
    except subprocess.CalledProcessError as error:
        sys.exit(f"race: could not install the peers ({error}); see the output above")
    missing = [path.name for path in wanted if not path.exists()]
    if missing:
        sys.exit(f"race: {', '.join(missing)} not found in {RACE_VENV} after installing")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny workloads")
    # 6 x 2 x 5 x 2: 120 turns a cell. At 32 a cell, two runs of the same code differed by
    # more than the differences the race is there to show.
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--conversations", type=int, default=2, help="per user per round")
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--think-s", type=float, default=0.8)
    parser.add_argument("--paste-tokens", type=int, default=450)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--engine-threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--prefill-tokens-per-s", type=float, default=0.0,
                        help="the scheduler's figure for the engines' prompt reading speed "
                             "(0: its default)")  # fmt: skip
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    parser.add_argument(
        "--holdback-on", nargs="*", default=["plain"], choices=WORKLOADS,
        help="workloads the platform also runs with its default output hold-back",
    )  # fmt: skip
    parser.add_argument(
        "--warmup-turns", type=int, default=4,
        help="untimed turns each system serves before its timed ones in every round (0: none)",
    )  # fmt: skip
    parser.add_argument(
        "--pin-engines", action="store_true",
        help="engines on core 0, every router process and the race's client on core 1",
    )  # fmt: skip
    parser.add_argument("--name", default="race", help="results land in bench/results/<name>.*")
    parser.add_argument(
        "--churn-target", choices=("busiest", "last"), default="busiest",
        help="churn kills the replica that read the most prompt tokens for the system so far "
        "in the round (busiest), or always the last one (last: as races before)",
    )  # fmt: skip
    parser.add_argument(
        "--setting",
        action="append",
        default=[],
        type=setting,
        metavar="CHAT_X=VALUE",
        help="a setting of the platform's services (an environment variable), for all of them",
    )
    parser.add_argument(
        "--serve-round-robin", nargs="+", metavar="PORT URL", help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.serve_round_robin:
        serve_round_robin(int(args.serve_round_robin[0]), args.serve_round_robin[1:])
        return
    if args.quick:
        args.users, args.turns, args.rounds, args.paste_tokens = 3, 2, 1, 300
        args.max_tokens = min(args.max_tokens, 16)
        if args.name == "race":
            args.name = "race-quick"
    if {"vllm-router", "sglang"} & set(args.systems):
        make_peer_venv()
    stamp = f"{tree_state()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    result = asyncio.run(race(args))
    names = [s for s in SYSTEMS if s in args.systems]
    rows = summarise(result["samples"], result["costs"], args.workloads, names)

    lines = [
        f"race started at {stamp}",
        f"race: {args.users} users x {args.conversations} conversation(s) x {args.turns} turns "
        f"x {args.rounds} round(s) per workload and system; answers <= {args.max_tokens} tokens; "
        f"think {args.think_s} s; seed {args.seed}",
        "3 llama-server replicas (SmolLM2-135M Q4_1, --parallel 2, "
        f"{args.engine_threads} thread(s) each) on this machine's {os.cpu_count()} cores, "
        f"shared by every system; total {result['total_s']:.0f} s",
        result["pinning"],
        *(
            ["the platform's services set " + ", ".join(f"{k}={v}" for k, v in args.setting)]
            if args.setting
            else []
        ),
        f"warm-up: each system served {args.warmup_turns} untimed turn(s) of its own "
        "conversations (salted apart from the timed ones) before its timed turns in every "
        "round, so the first system of a round does not meet cold processes",
        "CPU ms/req: every process of the router over the run / turns (platform: edge+gateway+"
        "scheduler+3 nodeagents); gw+sch: the platform's gateway+scheduler only; -idle: less "
        "what the same processes burn idle (measured 5 s before the race) over as long",
        "",
        f"{'workload':<8} {'system':<12} {'turns':>5} {'fail':>4} {'retry':>5} "
        f"{'TTFT p50':>8} {'p95':>7} {'E2E p50':>8} {'p95':>7} {'out tok/s':>9} "
        f"{'cached':>6} {'CPU ms/req':>10} {'-idle':>6} {'gw+sch':>6} {'-idle':>6} "
        f"{'hot':>4} {'stay':>5}",
    ]
    for (workload, name), row in rows.items():
        lines.append(
            f"{workload:<8} {name:<12} {row['turns']:>5} {row['failed']:>4} {row['retried']:>5} "
            f"{row['ttft_p50_ms']:>8.0f} {row['ttft_p95_ms']:>7.0f} {row['e2e_p50_ms']:>8.0f} "
            f"{row['e2e_p95_ms']:>7.0f} {row['output_tokens_per_s']:>9.1f} "
            f"{row['cached_share']:>6.1%} {fmt(row['router_cpu_ms_per_request'], '.2f'):>10} "
            f"{fmt(row['router_cpu_ms_per_request_over_idle'], '.2f'):>6} "
            f"{fmt(row['gateway_scheduler_cpu_ms_per_request'], '.2f'):>6} "
            f"{fmt(row['gateway_scheduler_cpu_ms_per_request_over_idle'], '.2f'):>6} "
            f"{row['prefill_hot_spot']:>4.2f} {fmt(row['stayed_share'], '.0%'):>5}"
        )
    lines.append(
        "out tok/s: output tokens of all turns over the runs' wall time (pauses included); "
        "cached: prompt tokens the engines found cached (usage.prompt_tokens_details); "
        "hot: the busiest replica's prefilled tokens over the mean (1.00 = even); "
        "stay: turns on the replica of the turn before (where the system names it)"
    )
    lines.append("each latency figure by round (ms; rounds in order, the systems' order reversed "
                 "every other round):")  # fmt: skip
    for (workload, name), row in rows.items():
        lines.append(f"  {workload:<8} {name:<12} " + "  ".join(
            f"{metric.removesuffix('_ms')} " + "/".join(f"{v:.0f}" for v in values)
            for metric, values in row["by_round"].items()))  # fmt: skip
    lines.append(
        "idle CPU ms/s (nothing in flight): "
        + ", ".join(f"{n} {1000 * v:.1f}" for n, v in result["idle"].items())
    )
    for (workload, name), row in rows.items():
        if row["cpu_ms_per_request_by_process"]:
            split = row["cpu_ms_per_request_by_process"]
            lines.append(
                f"{workload} {name} CPU ms/req by process: "
                + ", ".join(f"{part} {ms:.1f}" for part, ms in split.items())
            )
    lines.append(
        "where the time of a turn goes (means; decode: tokens after the first over the time "
        "after the first): "
        + "; ".join(
            f"{w} {n} uncached prompt {row['uncached_prompt_tokens']:.0f} tok, "
            f"e2e {row['e2e_mean_ms']:.0f} ms, decode {row['decode_tokens_per_s_p50']:.1f} tok/s"
            for (w, n), row in rows.items()
        )
    )
    lines.append("stay share (turns on the replica of the turn before), by workload and system: "
                 + "; ".join(f"{w} {n} {fmt(row['stayed_share'], '.0%')}"
                             for (w, n), row in rows.items()))  # fmt: skip
    lines.append(
        "  (-: the system does not name the replica it chose: llama-server's answer "
        "does not say which server wrote it, and the peers add no header that does)"
    )
    for (workload, name), row in rows.items():
        if name.startswith("platform"):
            lines.append(f"{workload} {name} picks by reason: {describe(row['picks_by_reason'])}")
            if row.get("load_reports_per_turn") is not None:
                lines.append(f"{workload} {name} load reports taken by the scheduler: "
                             f"{row['load_reports_per_turn']:.1f} a turn")  # fmt: skip
    if result["churn"]:
        lines.append("churn: " + " | ".join(result["churn"]))
    lines.extend(verdicts(rows, args.workloads))
    out = Path(__file__).parent / "results"
    plot(rows, args.workloads, names, out / f"{args.name}.png")
    summary = {
        "bench": "race",
        "config": {k: v for k, v in vars(args).items() if k != "serve_round_robin"},
        "rows": {f"{w}/{n}": {k: (round(v, 4) if isinstance(v, float) else v)
                              for k, v in row.items()} for (w, n), row in rows.items()},
    }  # fmt: skip
    (out / f"{args.name}.json").write_text(
        json.dumps({**summary, "churn": result["churn"],
                    "samples": [asdict(s) for s in result["samples"]]}, indent=1) + "\n"
    )  # fmt: skip
    lines.append(json.dumps(summary))
    publish(args.name, "\n".join(lines))


if __name__ == "__main__":
    main()
