"""The GPU-scale race: routing decisions on a fleet of simulated GPU replicas, not this machine's
tiny CPU engines. The platform against vllm-router (consistent hash on X-Session-Id) and
sglang-router (cache-aware), on the same workloads as bench/race.py (bench/race_workloads.py:
multi-turn conversations with think times; plain, and skewed, where a third of the users paste
long documents).

    .venv/bin/python bench/sim_race.py            # 16 replicas, 128 conversations a cell, ~15 min
    .venv/bin/python bench/sim_race.py --quick    # a smoke run, ~8 min (sim-race-quick.*)

Replicas: `nodeagent.sim.SimEngine` (domain/replica_sim.py's step loop on a 70B-on-4-H100s
hardware model by default: batching, queueing, chunked prefill, a prefix cache). The peers
route to --replicas of them served over HTTP (bench/sim_server.py), one process each; the
platform (a LocalPlatform) runs as many nodeagents on the `sim` engine, each holding the same
engine in its own process. One process a replica on both sides, so that on a busy machine
one process pacing sixteen replicas does not fall behind sixteen nodeagents that each get a
share of the CPU. So both sides get identical replicas, fresh for each system's run (the peers
run one after the other on the same replicas, each with conversations salted apart, so
nothing one cached serves the other).

Time: everything runs --slow times slower than on GPUs, so this machine's CPU, which the
routers' processes share with the simulated replicas, does not decide the result. Replica
speed (CHAT_NODEAGENT_SIM_SPEED, sim_server --speed) is 1/slow; think times and user starts
are multiplied by slow; and so are the platform's own clocks that a decision reads (its load
reports' interval and heartbeat, the scheduler's report timeout, the escape rule's minimum
wait, the expected answer time; prefill speed is divided by it), so it decides on what a
GPU fleet would show it. The peers have no such clocks (their health checks only find dead
workers). Measured times are divided by slow: the table is in simulated (GPU) milliseconds.

One round: each workload's users, system after system (the platform first, then the peers,
the order reversed for the second workload). Prints a table and ends with one JSON line;
bench/results/sim-race.txt and .json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import time
from pathlib import Path

import aiohttp

THIS_FILE = Path(__file__).resolve()
REPO = THIS_FILE.parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from benchkit import publish  # noqa: E402
from race import make_peer_venv, spawn, start_peers, tree_state  # noqa: E402
from race_picks import describe, picks_between, scrape_picks  # noqa: E402
from race_workloads import Shape, build  # noqa: E402
from sim_race_cells import Target, figures, run_cell  # noqa: E402

SYSTEMS = ("platform", "vllm-router", "sglang", "round-robin")
WORKLOADS = ("plain", "skewed")


def platform_env(args: argparse.Namespace) -> dict[str, str]:
    """The platform on simulated replicas, every clock a decision reads slowed alike."""
    slow = args.slow
    quiet = {f"CHAT_{s}_LOG_LEVEL": "warning" for s in ("GATEWAY", "EDGE", "SCHEDULER",
                                                         "NODEAGENT")}  # fmt: skip
    return {
        "CHAT_NODEAGENT_ENGINE": "sim",
        "CHAT_NODEAGENT_SIM_PRESET": args.preset,
        "CHAT_NODEAGENT_SIM_SPEED": str(1 / slow),
        "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": args.answer_tokens,
        "CHAT_NODEAGENT_REPORT_INTERVAL_S": str(0.25 * slow),
        "CHAT_NODEAGENT_REPORT_HEARTBEAT_S": str(1.0 * slow),
        "CHAT_SCHEDULER_REPORT_TIMEOUT_S": str(2.0 * slow),
        "CHAT_SCHEDULER_ESCAPE_MIN_WAIT_S": str(1.0 * slow),
        "CHAT_SCHEDULER_ANSWER_HOLD_S": str(13.0 * slow),
        "CHAT_SCHEDULER_PREFILL_TOKENS_PER_S": str(2000.0 / slow),
        "CHAT_SCHEDULER_LADDER_SATURATED_WAIT_S": str(2.0 * slow),
        "CHAT_GATEWAY_NODE_STALL_TIMEOUT_S": str(10.0 * slow),
        "CHAT_GATEWAY_NODE_FIRST_TOKEN_TIMEOUT_S": str(120.0 * slow),
        # The routing alone: no output hold-back (bench/race.py's platform-h0).
        "CHAT_GATEWAY_OUTPUT_HOLDBACK_TOKENS": "0",
        "CHAT_GATEWAY_OUTPUT_CHECK_EVERY_TOKENS": "1",
        "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e12",
        "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e12",
        "CHAT_GATEWAY_MAX_OPEN_STREAMS_PER_USER": "100000",
        "CHAT_EDGE_MAX_REQUESTS_PER_IP": "0",
        **quiet,
    }


async def start_sim_servers(args: argparse.Namespace, state: Path, processes: list) -> list[str]:
    """The peers' replicas, one process each as the platform's nodeagents are, so that on a
    busy machine each side's replicas get the same share of the CPU."""
    ready = [state / f"sim-server-{i}.ready.json" for i in range(args.replicas)]
    for i, path in enumerate(ready):
        argv = [sys.executable, str(REPO / "bench" / "sim_server.py"), "--replicas", "1",
                "--name-from", str(i), "--preset", args.preset, "--speed", str(1 / args.slow),
                "--answer-tokens", args.answer_tokens, "--ready-file", str(path)]  # fmt: skip
        processes.append(await spawn(argv, state / f"sim-server-{i}.log"))
    deadline = time.monotonic() + 120
    while not all(path.exists() for path in ready):
        if any(p.returncode is not None for p in processes) or time.monotonic() > deadline:
            raise RuntimeError("sim_server did not start; see .race/sim-state/sim-server-*.log")
        await asyncio.sleep(0.2)
    return [url for path in ready for url in json.loads(path.read_text())["urls"]]


async def race(args: argparse.Namespace) -> dict:
    from clients.chatctl.platform import LocalPlatform, PlatformSettings

    state = REPO / ".race" / "sim-state"
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True)
    names = [s for s in SYSTEMS if s in args.systems]
    shape = Shape(users=args.users, conversations=args.conversations, turns=args.turns,
                  think_s=args.think_s, paste_tokens=args.paste_tokens,
                  stagger_s=args.ramp_s / max(1, args.users))  # fmt: skip
    processes: list[asyncio.subprocess.Process] = []
    platform = None
    rows, picks, timings = {}, {}, {}
    started = time.perf_counter()
    try:
        targets: dict[str, Target] = {}
        metrics_url = ""
        if "platform" in names:
            platform = LocalPlatform(PlatformSettings(
                state_dir=state / "platform", edge_listen="127.0.0.1:0", nodes=args.replicas,
                startup_timeout_s=600.0, extra_env=platform_env(args),
            ))  # fmt: skip
            await platform.start()
            targets["platform"] = Target("platform", platform.edge_url, platform.tokens["plus"])
            port = platform._child("scheduler").ready["metrics"]
            metrics_url = f"http://127.0.0.1:{port}/metrics"
        timings["platform_up_s"] = time.perf_counter() - started
        peers = [n for n in names if n != "platform"]
        if peers:
            urls = await start_sim_servers(args, state, processes)
            routers: list[asyncio.subprocess.Process] = []
            try:
                started_peers = await start_peers(urls, state, peers, routers)
            finally:
                processes.extend(routers)  # start_peers pairs its own list with its systems
            for name, system in started_peers.items():
                targets[name] = Target(name, system.url)
        timings["all_up_s"] = time.perf_counter() - started
        print(f"up in {timings['all_up_s']:.0f}s ({args.replicas} replicas a system)", flush=True)
        for w, workload in enumerate(args.workloads):
            scripts = build(workload, shape, args.seed, 0)
            for name in names if w % 2 == 0 else list(reversed(names)):
                begun = time.perf_counter()
                async with aiohttp.ClientSession() as http:
                    before = (
                        (await scrape_picks(http, metrics_url))[0] if name == "platform" else None
                    )
                    turns = await run_cell(targets[name], workload, scripts, args.max_tokens,
                                           args.slow, str(args.seed))  # fmt: skip
                    if name == "platform":
                        picks[workload] = picks_between(
                            before, (await scrape_picks(http, metrics_url))[0]
                        )
                row = figures(turns, args.replicas)
                row["wall_s"] = time.perf_counter() - begun
                rows[(workload, name)] = row
                print(f"  {workload:<7} {name:<12} {row['wall_s']:6.0f}s real, {row['turns']} "
                      f"turns, {row['failed']} failed", flush=True)  # fmt: skip
    finally:
        for process in processes:
            if process.returncode is None:
                process.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(process.wait(), 10)
                if process.returncode is None:
                    process.kill()
                    await process.wait()
        if platform is not None:
            await platform.stop()
    return {"rows": rows, "picks": picks, "timings": timings,
            "total_s": time.perf_counter() - started}  # fmt: skip


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or value != value else format(value, spec)


def report(args: argparse.Namespace, result: dict, stamp: str) -> list[str]:
    rows = result["rows"]
    lines = [
        f"sim-race started at {stamp}; total {result['total_s']:.0f} s real",
        f"{args.replicas} simulated replicas a system ({args.preset}, answers "
        f"{args.answer_tokens} tokens, at most {args.max_tokens}); time slowed {args.slow:g}x "
        f"for all (replica speed 1/{args.slow:g}; think, starts and the platform's clocks "
        f"x{args.slow:g}); figures in simulated ms",
        f"{args.users} users x {args.conversations} conversation(s) x {args.turns} turns a "
        f"cell, think {args.think_s:g} s (mean), starts spread over {args.ramp_s:g} s, "
        f"pastes ~{args.paste_tokens} tokens (skewed); seed {args.seed}; one round",
        "",
        f"{'workload':<8} {'system':<12} {'turns':>5} {'fail':>4} {'TTFT p50':>8} {'p95':>7} "
        f"{'E2E p50':>8} {'p95':>7} {'cached':>6} {'hot':>5} {'stay':>5} {'real s':>6}",
    ]
    for (workload, name), r in rows.items():
        lines.append(
            f"{workload:<8} {name:<12} {r['turns']:>5} {r['failed']:>4} "
            f"{r['ttft_p50_ms']:>8.0f} {r['ttft_p95_ms']:>7.0f} {r['e2e_p50_ms']:>8.0f} "
            f"{r['e2e_p95_ms']:>7.0f} {r['cached_share']:>6.1%} {r['hot_spot']:>5.2f} "
            f"{fmt(r['stay_share'], '.0%'):>5} {r['wall_s']:>6.0f}"
        )
    lines.append(
        "cached: prompt tokens the replicas found in their prefix cache; hot: the busiest "
        "replica's prompt tokens read (not cached) over the mean of all replicas (1.00 = "
        "even); stay: turns on the replica of the conversation's turn before"
    )
    for workload, found in result["picks"].items():
        lines.append(f"{workload} platform picks by reason: {describe(found)}")
    for workload in args.workloads:
        us = rows.get((workload, "platform"))
        for peer in ("vllm-router", "sglang"):
            them = rows.get((workload, peer))
            if us is None or them is None:
                continue
            lines.append(f"{workload}: platform against {peer}: " + ", ".join(
                f"{m.removesuffix('_ms')} {us[m] / them[m] - 1:+.0%}"
                for m in ("ttft_p50_ms", "ttft_p95_ms", "e2e_p50_ms", "e2e_p95_ms")
            ) + " (one round: no spread to judge noise by)")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--replicas", type=int, default=16)
    parser.add_argument("--preset", default="70b-4xh100")
    parser.add_argument("--slow", type=float, default=5.0, help="the slow-down factor")
    parser.add_argument("--users", type=int, default=128)
    parser.add_argument("--conversations", type=int, default=1, help="per user, in turn")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--think-s", type=float, default=4.0, help="simulated seconds, mean")
    parser.add_argument("--ramp-s", type=float, default=8.0, help="users' starts spread")
    parser.add_argument("--paste-tokens", type=int, default=3000)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--answer-tokens", default="40,160", help="SHORTEST,LONGEST")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    parser.add_argument("--systems", nargs="+", default=list(SYSTEMS[:3]), choices=SYSTEMS)
    parser.add_argument("--name", default="sim-race")
    args = parser.parse_args()
    if args.quick:
        args.replicas, args.users, args.conversations, args.turns = 4, 16, 1, 2
        args.think_s, args.ramp_s = 2.0, 2.0
        args.name = "sim-race-quick" if args.name == "sim-race" else args.name
    if {"vllm-router", "sglang"} & set(args.systems):
        make_peer_venv()
    stamp = f"{tree_state()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    result = asyncio.run(race(args))
    lines = report(args, result, stamp)
    summary = {
        "bench": "sim_race",
        "config": vars(args),
        "timings_s": {k: round(v, 1) for k, v in result["timings"].items()},
        "rows": {f"{w}/{n}": {k: round(v, 4) if isinstance(v, float) else v
                              for k, v in r.items()} for (w, n), r in result["rows"].items()},
        "platform_picks": result["picks"],
    }  # fmt: skip
    (THIS_FILE.parent / "results" / f"{args.name}.json").write_text(
        json.dumps(summary, indent=1) + "\n"
    )
    lines.append(json.dumps(summary))
    publish(args.name, "\n".join(lines))


if __name__ == "__main__":
    main()
