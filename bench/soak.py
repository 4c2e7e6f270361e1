"""Soak: mixed traffic for a long while, processes SIGKILLed and restarted at random, every
process's memory and open descriptors sampled; lost answers must be 0, memory flat.

The platform: the edge, two gateways sharing answers through a real Redis, two schedulers
sharing membership and the ladder through a real etcd, three simulated nodes (answers of 30 to
150 tokens at twice real time), SQLite. Users of both tiers hold conversations of 2 to 6 turns
through the edge (bench/soak_traffic.py): some answers are stopped, some streams dropped and
resumed, a few messages blocked by the input check.

Faults: every --kill-every-s seconds (0.5x to 1.5x, at random) one of nodeagent-1,
nodeagent-2, gateway-1 and scheduler-1 (in a random order per round, so each is killed as
often) is SIGKILLed, left dead 1-5 s, restarted at its address, and the platform waited for
until whole. The edge, `gateway`, `scheduler` and `nodeagent-0` are never killed: there is one
long-lived process of each role, whose memory can be measured across the run.

Memory: each process's RSS is sampled every --sample-s seconds (bench/soak_samples.py says how
the slope is computed: least-squares growth over the window, as a share of the mean). The
window starts after the warm-up (--warmup-minutes; default a third of the run, the last 20 of
30 minutes), which is longer than what fills the bounded stores: ended runs kept
keep_ended_runs_s (300 s here), the nodeagent's token-count cache (tokenize_cache_texts: 256
texts here) and the simulator's remembered conversations (64 here): their sizes at the
warm-up's end and the run's end are in the report (gateway_runs_kept,
nodeagent_token_counts_kept). Flat: within 5 % for every never-killed process of the platform
(Redis and etcd are reported, not judged). Descriptors: every never-killed process, Redis and
etcd included, holds at most FD_SLACK more at its peak in the run's last third than in its
first.

    PYTHONPATH=. .venv/bin/python bench/soak.py [--minutes 30] [--out bench/results/soak.txt]

Prints a table and ends with one JSON line; writes them to --out as well; exits 1 when an
answer was lost, descriptors grew, or (for runs of 30 minutes or more) memory was not flat.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import aiohttp

from bench.soak_samples import MARKS, Sampler, SlotFigures, figures
from bench.soak_traffic import ANSWER_TOKENS, SYSTEM_PROMPT, Ledger, Mix, User
from clients.admin_client import AdminClient
from clients.chatctl.platform import LocalPlatform, PlatformSettings
from tests.faults import kill, restart_the_dead
from tests.servers import run_etcd, run_redis

KILL_SET = ("nodeagent-1", "nodeagent-2", "gateway-1", "scheduler-1")
LONG_LIVED = ("edge", "gateway", "scheduler", "nodeagent-0")
INFRA = ("redis", "etcd")
FD_SLACK = 10
FLAT_SHARE = 0.05
# No fault this close to the end, so the answers in flight settle before the run is judged.
QUIET_END_S = 20.0
KEEP_ENDED_RUNS_S = 300
TOKENIZE_CACHE_TEXTS = 256
SIM_REMEMBERED = 64
GAUGES = re.compile(r"^(gateway_runs_kept|nodeagent_token_counts_kept) ([0-9.e+]+)$", re.M)


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    slot: str
    down_s: float
    back_s: float  # from the kill until the platform was whole again


def settings(state_dir: Path, redis_url: str, etcd: str) -> PlatformSettings:
    return PlatformSettings(
        state_dir=state_dir,
        edge_listen="127.0.0.1:0",
        nodes=3,
        gateways=2,
        schedulers=2,
        redis_url=redis_url,
        etcd_endpoint=etcd,
        extra_env={
            "CHAT_NODEAGENT_ENGINE": "sim",
            "CHAT_NODEAGENT_SIM_SPEED": "2",
            "CHAT_NODEAGENT_SIM_ANSWER_TOKENS": ",".join(map(str, ANSWER_TOKENS)),
            "CHAT_NODEAGENT_SIM_REMEMBERED_CONVERSATIONS": str(SIM_REMEMBERED),
            "CHAT_NODEAGENT_TOKENIZE_CACHE_TEXTS": str(TOKENIZE_CACHE_TEXTS),
            "CHAT_GATEWAY_SYSTEM_PROMPT": SYSTEM_PROMPT,
            "CHAT_GATEWAY_ROUTER": "false",
            "CHAT_GATEWAY_KEEP_ENDED_RUNS_S": str(KEEP_ENDED_RUNS_S),
            # Traffic for the whole run: buckets metered in Redis, never spent.
            "CHAT_GATEWAY_FREE_BUCKET_CAPACITY": "1e9",
            "CHAT_GATEWAY_PLUS_BUCKET_CAPACITY": "1e9",
        },
    )


# Faults ------------------------------------------------------------------------------------------


async def chaos(
    platform: LocalPlatform,
    http: aiohttp.ClientSession,
    rng: random.Random,
    every_s: float,
    clock: Clock,
    end_s: float,
    faults: list[Fault],
) -> None:
    order: list[str] = []
    while True:
        wait_s = rng.uniform(0.5, 1.5) * every_s
        if clock() + wait_s > end_s - QUIET_END_S:
            return
        await asyncio.sleep(wait_s)
        order = order or rng.sample(KILL_SET, len(KILL_SET))
        slot = order.pop()
        at_s = clock()
        await kill(next(c for c in platform.children if c.name == slot))
        down_s = rng.uniform(1.0, 5.0)
        await asyncio.sleep(down_s)
        await restart_the_dead(platform, http)
        faults.append(Fault(round(at_s, 1), slot, round(down_s, 1), round(clock() - at_s, 1)))
        print(f"  {at_s:7.1f} s: killed {slot}, whole again after {clock() - at_s:.1f} s",
              file=sys.stderr, flush=True)  # fmt: skip


class Clock:
    """Seconds since the traffic started."""

    def __init__(self) -> None:
        self._zero = time.monotonic()

    def __call__(self) -> float:
        return time.monotonic() - self._zero


async def gauges(platform: LocalPlatform, http: aiohttp.ClientSession) -> dict[str, float]:
    """The bounded stores' sizes, per never-killed process that has them."""
    found = {}
    for child in platform.children:
        if child.name in LONG_LIVED and "metrics" in child.ready:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{child.ready['metrics']}/metrics") as r:
                    for name, value in GAUGES.findall(await r.text()):
                        found[f"{child.name}:{name}"] = float(value)
    return found


# The run -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Options:
    minutes: float
    warmup_minutes: float
    users: int
    kill_every_s: float
    sample_s: float
    seed: int


async def make_users(
    platform: LocalPlatform, http: aiohttp.ClientSession, options: Options, ledger: Ledger
) -> list[User]:
    rng = random.Random(options.seed)
    users = []
    async with AdminClient(
        platform.scheduler_address, platform.admin_token, tls=platform.tls()
    ) as admin:
        for i in range(options.users):
            tier = "free" if i % 2 == 0 else "plus"
            created = await admin.create_user(f"soak-{tier}-{i}", tier)
            users.append(User(http, platform.edge_url, created.user.user_id, created.token,
                              Mix(), random.Random(rng.random()), ledger))  # fmt: skip
    return users


async def soak(platform: LocalPlatform, pids: dict[str, int], options: Options) -> dict:
    ledger, faults = Ledger(), []
    end_s = options.minutes * 60
    warmup_s = options.warmup_minutes * 60
    timeout = aiohttp.ClientTimeout(total=None, sock_read=30)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        users = await make_users(platform, http, options, ledger)
        clock = Clock()

        def live() -> dict[str, int]:
            running = {c.name: c.process.pid for c in platform.children
                       if c.process.returncode is None}  # fmt: skip
            return {**running, **pids}

        sampler = Sampler(live, options.sample_s, clock)
        sampling = asyncio.create_task(sampler.run())
        until = asyncio.get_running_loop().time() + end_s
        fault_rng = random.Random(options.seed + 1)
        warm = asyncio.create_task(_gauges_at(platform, http, clock, warmup_s))
        await asyncio.gather(
            chaos(platform, http, fault_rng, options.kill_every_s, clock, end_s, faults),
            *(user.run(until) for user in users),
        )
        ended_s = clock()
        await sampler.sample_once()
        sampling.cancel()
        at_end = await gauges(platform, http)
        at_warm = await warm if warm.done() else {}
        warm.cancel()
    window = (warmup_s, end_s)
    slots = {
        slot: figures(slot, samples, window, end_s, gap_s=2.5 * options.sample_s)
        for slot, samples in sorted(sampler.samples.items())
    }
    return summary(ledger, faults, slots, options, ended_s, {"warm": at_warm, "end": at_end})


async def _gauges_at(
    platform: LocalPlatform, http: aiohttp.ClientSession, clock: Clock, at_s: float
) -> dict[str, float]:
    await asyncio.sleep(max(0.0, at_s - clock()))
    return await gauges(platform, http)


def summary(
    ledger: Ledger,
    faults: list[Fault],
    slots: dict[str, SlotFigures],
    options: Options,
    ended_s: float,
    stores: dict[str, dict[str, float]],
) -> dict:
    messages = ledger.messages
    accepted = [m for m in messages if m.accepted]
    lost = [m for m in messages if m.lost]
    exact = [m.exact for m in messages if m.exact is not None]
    judged_memory = options.minutes >= 30
    growths = {s: f.memory_growth for s, f in slots.items() if s in LONG_LIVED}
    fd_growths = {s: f.fd_growth for s, f in slots.items() if s in LONG_LIVED + INFRA}
    memory_flat = all(g is not None and abs(g) <= FLAT_SHARE for g in growths.values())
    fds_bounded = all(g is not None and g <= FD_SLACK for g in fd_growths.values())
    return {
        "bench": "soak",
        "minutes": options.minutes,
        "ran_s": round(ended_s, 1),
        "warmup_minutes": options.warmup_minutes,
        "users": options.users,
        "sent": len(messages),
        "accepted": len(accepted),
        "done": sum(bool(m.finish) for m in accepted),
        "busy": sum(m.busy for m in messages),
        "not_accepted": len(messages) - len(accepted),
        "stopped": sum(m.finish == "cancelled" for m in messages),
        # The reply said "stopped", but the answer ended by itself first: its last tokens were
        # in as the stop arrived.
        "stopped_said_but_ended": sum(
            m.stop_said_stopped and m.finish != "cancelled" for m in messages
        ),
        "dropped_and_resumed": sum(m.action == "resume" and m.acted for m in messages),
        "resumes": sum(m.resumes for m in messages),
        "blocked": sum(m.action == "blocked" and m.finish == "refused" for m in messages),
        "lost": len(lost),
        "lost_examples": [_example(m) for m in lost[:5]],
        "ids_out_of_order": sum(not m.ids_in_order for m in accepted),
        "exact_checked": len(exact),
        "inexact": exact.count(False),
        "kills": {slot: sum(f.slot == slot for f in faults) for slot in KILL_SET},
        "back_s_max": max((f.back_s for f in faults), default=0.0),
        "faults": [asdict(f) for f in faults],
        "stores": stores,
        "processes": {slot: asdict(f) for slot, f in slots.items()},
        "memory_judged": judged_memory,
        "memory_flat": memory_flat,
        "fds_bounded": fds_bounded,
    }


def _example(message) -> dict[str, object]:
    return {"message_id": message.message_id, "action": str(message.action),
            "finish": message.finish, "errors": message.errors[-3:],
            "shown_chars": len(message.text),
            "stored_chars": None if message.stored is None else len(message.stored)}  # fmt: skip


def report(result: dict) -> str:
    r = result
    lines = [
        f"soak: {r['minutes']} min of mixed traffic through the edge ({r['users']} users, "
        f"free and plus), {len(r['faults'])} SIGKILLs of nodes, a gateway and a scheduler; "
        f"simulated nodes, real Redis and etcd, on 2 CPUs shared with other agents' work",
        f"messages: {r['sent']} sent, {r['accepted']} accepted, {r['done']} done, "
        f"{r['busy']} busy, {r['not_accepted']} not accepted; {r['stopped']} stopped "
        f"({r['stopped_said_but_ended']} more stops came as the answer was ending), "
        f"{r['dropped_and_resumed']} dropped and resumed ({r['resumes']} resumes in all), "
        f"{r['blocked']} blocked",
        f"lost answers: {r['lost']}   event ids out of order: {r['ids_out_of_order']}   "
        f"inexact: {r['inexact']} of {r['exact_checked']} checked against the uninterrupted "
        f"answer",
        "kills: " + ", ".join(f"{s} {n}" for s, n in r["kills"].items())
        + f"; whole again within {r['back_s_max']:.1f} s of each kill",
        f"bounded stores at warm-up's end ({r['warmup_minutes']:.1f} min) -> at the end: "
        + ", ".join(f"{k} {r['stores']['warm'].get(k, '-')} -> {v:g}"
                    for k, v in sorted(r["stores"]["end"].items())),
        "",
        f"{'process':<12} {'restarts':>8} {'RSS MB first':>12} {'last':>6} {'peak':>6} "
        f"{'growth %':>9} {'fds':>7} {'fd growth':>9}",
    ]  # fmt: skip
    for slot, p in r["processes"].items():
        growth = "-" if p["memory_growth"] is None else f"{100 * p['memory_growth']:+.1f}"
        fd = "-" if p["fd_growth"] is None else f"{p['fd_growth']:+d}"
        lines.append(
            f"{slot:<12} {p['restarts']:>8} {p['rss_first_mb']:>12.1f} {p['rss_last_mb']:>6.1f} "
            f"{p['rss_peak_mb']:>6.1f} {growth:>9} {p['fds_min']:>3}-{p['fds_max']:<3} {fd:>9}"
        )
    marks = [r["minutes"] * i / (MARKS - 1) for i in range(MARKS)]
    lines += [
        "",
        "RSS MB of the never-killed processes, at minute "
        + " ".join(f"{round(m, 1):g}" for m in marks) + ":",
    ]  # fmt: skip
    for slot, p in r["processes"].items():
        if slot in LONG_LIVED + INFRA:
            lines.append(f"{slot:<12} " + " ".join(f"{mb:6.1f}" for mb in p["rss_mb_at"]))
    judged = "judged" if r["memory_judged"] else "not judged: the run is under 30 minutes"
    lines += [
        f"memory growth over the window ({r['warmup_minutes']:.1f} min to the end): least-squares "
        f"slope x window / mean RSS; flat within {FLAT_SHARE:.0%}: "
        f"{'yes' if r['memory_flat'] else 'no'} ({judged})",
        f"descriptors bounded (peak in the last third <= first third's + {FD_SLACK}): "
        f"{'yes' if r['fds_bounded'] else 'no'}",
        json.dumps(r),
    ]
    return "\n".join(lines)


async def run(options: Options, state_dir: Path) -> dict:
    with run_redis() as redis, run_etcd() as etcd:
        platform = LocalPlatform(settings(state_dir, redis.url, etcd.endpoint))
        await platform.start()
        try:
            return await soak(platform, {"redis": redis.pid, "etcd": etcd.process.pid}, options)
        finally:
            await platform.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long traffic runs")
    parser.add_argument("--warmup-minutes", type=float, help="default: a third of --minutes")
    parser.add_argument("--users", type=int, default=8, help="half free, half plus")
    parser.add_argument("--kill-every-s", type=float, default=40.0)
    parser.add_argument("--sample-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results/soak.txt")
    parser.add_argument("--state-dir", type=Path, help="keep the platform's logs here")
    args = parser.parse_args()
    warmup = args.minutes / 3 if args.warmup_minutes is None else args.warmup_minutes
    options = Options(args.minutes, warmup, args.users, args.kill_every_s, args.sample_s,
                      args.seed)  # fmt: skip
    if args.state_dir:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(run(options, args.state_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="soak-") as folder:
            result = asyncio.run(run(options, Path(folder)))
    text = report(result)
    print(text)
    args.out.write_text(text + "\n")
    memory_ok = result["memory_flat"] or not result["memory_judged"]
    sys.exit(0 if result["lost"] == 0 and result["fds_bounded"] and memory_ok else 1)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
