"""How fast the scheduler picks a replica: the pure reference `domain.picker.pick_replica` (a
Python loop hashing every replica on every pick) against `domain.pool_index.PoolIndex`, on the
same inputs in the same run, on one core, for pools of 100, 1,000 and 10,000 replicas. A load
report lands between any two picks, as the nodes' reports every 250 ms do.

    .venv/bin/python bench/picker.py [--picks 20000] [--seed 1]

Goal: a region has about 750 four-GPU replicas and peaks at 3,500 messages/s; at 1,000
replicas a pick must manage 20,000/s with p99 under 0.5 ms. Prints a table and ends with one
JSON line. Results land in bench/results/picker.txt.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import time
from dataclasses import dataclass

import numpy as np
from benchkit import pin_to_one_core, publish

from domain.picker import Pick, ReplicaLoad, pick_replica
from domain.pool_index import PoolIndex
from domain.types import NodeState

POOL_SIZES = (100, 1_000, 10_000)
GOAL_REPLICAS, GOAL_PICKS_PER_S, GOAL_P99_MS = 1_000, 20_000, 0.5
KV_CAPACITY = 600_000  # tokens of KV cache on a four-GPU replica of a large model
STATES = [NodeState.READY, NodeState.DRAINING, NodeState.STARTING, NodeState.DEAD]
STATE_WEIGHTS = [94, 2, 2, 2]  # a fleet mid-rollout: a few replicas out of rotation
# The naive loop costs about 15 ms a pick at 10,000 replicas: give it this many replica-picks.
NAIVE_BUDGET = 2_000_000


@dataclass(frozen=True, slots=True)
class Step:
    conversation_id: str
    prompt_tokens: int
    reusable_prefix_tokens: int
    report: ReplicaLoad  # applied before the pick


def load(rng: random.Random, node_id: str, state: NodeState | None = None) -> ReplicaLoad:
    return ReplicaLoad(
        node_id=node_id,
        address=f"{node_id}.chat.internal:50061",
        pool="large",
        model="llama-3.3-70b",
        state=state or rng.choices(STATES, STATE_WEIGHTS)[0],
        free_kv_tokens=int(KV_CAPACITY * rng.random() ** 0.5),  # mostly roomy, some full
        queued_prefill_tokens=int(rng.expovariate(1 / 3_000)),  # mostly short, a long tail
        running_requests=rng.randint(0, 64),
        waiting_requests=rng.randint(0, 8),
        kv_usage=rng.random(),
        prefix_hit_rate=rng.random(),
    )


def workload(rng: random.Random, size: int, picks: int) -> tuple[list[ReplicaLoad], list[Step]]:
    replicas = [load(rng, f"gpu-use1-{i:05d}") for i in range(size)]
    states = {r.node_id: r.state for r in replicas}
    steps = []
    for _ in range(picks):
        node_id = replicas[rng.randrange(size)].node_id
        if rng.random() < 0.01:  # now and then a replica drains, dies or comes back
            states[node_id] = rng.choices(STATES, STATE_WEIGHTS)[0]
        prompt = int(rng.lognormvariate(7.5, 1.0)) + 20  # median about 1,800 tokens
        # A follow-up turn reuses all but its new message; a fifth are new conversations.
        reusable = 0 if rng.random() < 0.2 else max(0, prompt - rng.randint(20, 600))
        report = load(rng, node_id, states[node_id])
        steps.append(Step(f"c_{rng.getrandbits(64):016x}", prompt, reusable, report))
    return replicas, steps


def run_naive(replicas: list[ReplicaLoad], steps: list[Step]) -> tuple[list[int], list[Pick]]:
    table = list(replicas)
    position = {r.node_id: i for i, r in enumerate(table)}
    for step in steps[:200]:  # warm up
        pick_replica(step.conversation_id, step.prompt_tokens, step.reusable_prefix_tokens, table)
    times, picks = [], []
    for step in steps:
        table[position[step.report.node_id]] = step.report
        start = time.perf_counter_ns()
        pick = pick_replica(
            step.conversation_id, step.prompt_tokens, step.reusable_prefix_tokens, table
        )
        times.append(time.perf_counter_ns() - start)
        picks.append(pick)
    return times, picks


def run_index(
    replicas: list[ReplicaLoad], steps: list[Step]
) -> tuple[list[int], list[Pick], list[int]]:
    index = PoolIndex(replicas)
    for step in steps[:200]:  # warm up
        index.pick(step.conversation_id, step.prompt_tokens, step.reusable_prefix_tokens)
    times, picks, updates = [], [], []
    for step in steps:
        start = time.perf_counter_ns()
        index.update(step.report.node_id, step.report)
        picked = time.perf_counter_ns()
        pick = index.pick(step.conversation_id, step.prompt_tokens, step.reusable_prefix_tokens)
        times.append(time.perf_counter_ns() - picked)
        updates.append(picked - start)
        picks.append(pick)
    return times, picks, updates


def pct(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(times: list[int]) -> dict:
    return {
        "picks": len(times),
        "picks_per_s": round(len(times) * 1e9 / sum(times)),
        "p50_us": round(pct(times, 0.5) / 1000, 1),
        "p99_us": round(pct(times, 0.99) / 1000, 1),
    }


def same(naive: list[Pick], index: list[Pick]) -> bool:
    # The index must hand back the reference's very ReplicaLoad, for the same reason.
    return all(
        a == b and a.replica is b.replica for a, b in zip(naive, index, strict=False)
    ) and len(naive) <= len(index)


def measure(rng: random.Random, size: int, picks: int) -> dict:
    replicas, steps = workload(rng, size, picks)
    naive_steps = steps[: max(200, min(picks, NAIVE_BUDGET // size))]
    gc.collect()
    naive_times, naive_picks = run_naive(replicas, naive_steps)
    gc.collect()
    index_times, index_picks, update_times = run_index(replicas, steps)
    naive, index = summarise(naive_times), summarise(index_times)
    index["update_p50_us"] = round(pct(update_times, 0.5) / 1000, 2)
    index["update_p99_us"] = round(pct(update_times, 0.99) / 1000, 2)
    return {
        "naive": naive,
        "index": index,
        "speedup": round(index["picks_per_s"] / naive["picks_per_s"], 1),
        "identical": same(naive_picks, index_picks),
    }


def table(results: dict[int, dict]) -> list[str]:
    lines = [
        f"{'replicas':>8} {'picker':<6} {'picks':>6} {'picks/s':>9} {'p50 us':>8} "
        f"{'p99 us':>8} {'speedup':>8} {'update p99 us':>14}"
    ]
    for size, row in results.items():
        for name in ("naive", "index"):
            r = row[name]
            speedup = f"{row['speedup']:>7.1f}x" if name == "index" else f"{'1.0x':>8}"
            update = f"{r['update_p99_us']:>14.2f}" if name == "index" else f"{'-':>14}"
            lines.append(
                f"{size:>8,} {name:<6} {r['picks']:>6} {r['picks_per_s']:>9,} "
                f"{r['p50_us']:>8.1f} {r['p99_us']:>8.1f} {speedup} {update}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--picks", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cpu = pin_to_one_core()
    rng = random.Random(args.seed)
    results = {size: measure(rng, size, args.picks) for size in POOL_SIZES}
    goal = results[GOAL_REPLICAS]["index"]
    met = goal["picks_per_s"] >= GOAL_PICKS_PER_S and goal["p99_us"] < GOAL_P99_MS * 1000
    identical = all(row["identical"] for row in results.values())
    lines = [
        f"picker: up to {args.picks:,} picks per pool, a load report between picks; "
        f"{'CPU ' + str(cpu) if cpu is not None else 'unpinned'}, "
        f"Python {platform.python_version()}, numpy {np.__version__}",
        "naive = domain.picker.pick_replica (the reference); index = domain.pool_index.PoolIndex",
        *table(results),
        f"goal at {GOAL_REPLICAS:,} replicas (>= {GOAL_PICKS_PER_S:,} picks/s, p99 < "
        f"{GOAL_P99_MS} ms): {'met' if met else 'NOT met'} with {goal['picks_per_s']:,} "
        f"picks/s, p99 {goal['p99_us'] / 1000:.3f} ms; index picks identical to the "
        f"reference: {'yes' if identical else 'NO'}",
    ]
    result = {
        "bench": "picker",
        "cpu": cpu,
        "picks": args.picks,
        "goal_met": met,
        "identical": identical,
        "speedup": {str(size): row["speedup"] for size, row in results.items()},
        "pools": {str(size): row for size, row in results.items()},
    }
    lines.append(json.dumps(result))
    text = "\n".join(lines)
    publish("picker", text)
    if not identical:
        raise SystemExit("PoolIndex picked differently from the reference")


if __name__ == "__main__":
    main()
