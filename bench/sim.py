"""How fast the replica simulator steps: simulated replica-steps per second on one core.

    .venv/bin/python bench/sim.py [--steps 200000] [--seed 1]

Goal: the fleet simulator steps about 750 replicas about 30 times a second of simulated time;
to keep up with real time, one core must manage 20,000 replica-steps/s with about 100 answers
running on each replica. Each workload is a closed loop: whenever an answer ends, that
conversation's next turn arrives (its whole history as the prompt, most of it cached), or a new
conversation starts. The driver's own work (submitting, reading results) is in the timing,
as it will be in a fleet simulation. Prints a table and ends with one JSON line. Results land
in bench/results/sim.txt.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import time
from dataclasses import dataclass, field

from benchkit import pin_to_one_core, publish

from domain.replica_hardware import H100_8B, H100x4_70B, ReplicaPreset
from domain.replica_sim import ReplicaSim

GOAL_STEPS_PER_S = 20_000  # 750 replicas x about 30 steps/s
# A conversation past this starts over: contexts average about 3,400 tokens, sizing 000's 1.1 GB.
CONTEXT_LIMIT = 6_000
WARM_UP_S = 120.0  # simulated seconds before timing: the cache and the batch are full by then


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    answers: int  # conversations in flight
    long_prompt_every_s: float = 0.0  # a 30,000-token paste now and then; 0 for never
    preset: ReplicaPreset = H100x4_70B


WORKLOADS = (
    Workload("70B/4xH100, 100 answers", 100),
    Workload("70B/4xH100, 100 + 30k prompt/5 s", 100, long_prompt_every_s=5.0),
    Workload("8B/1xH100, 100 answers", 100, preset=H100_8B),
)


@dataclass(slots=True)
class Driver:
    """Keeps `answers` conversations in flight on one simulated replica."""

    sim: ReplicaSim
    rng: random.Random
    workload: Workload
    contexts: dict[str, int] = field(default_factory=dict)  # conversation -> tokens so far
    conversation_of: dict[str, str] = field(default_factory=dict)  # request -> conversation
    serial: int = 0
    next_long_s: float = 0.0
    tokens: int = 0  # answer tokens written

    def turn(self, conversation: str | None = None) -> None:
        self.serial += 1
        context = self.contexts.get(conversation, 0) if conversation else 0
        if conversation is None or context > CONTEXT_LIMIT:
            conversation, context = f"c{self.serial}", self.rng.randint(500, 2_000)
        prompt = context + self.rng.randint(20, 400)  # the history, then the new message
        answer = self.rng.randint(100, 700)
        request = f"m{self.serial}"
        paid = self.rng.random() < 0.2
        self.sim.submit(request, prompt, answer, paid=paid, conversation=conversation)
        self.contexts[conversation] = prompt + answer
        self.conversation_of[request] = conversation

    def long_prompt(self) -> None:
        self.serial += 1
        self.sim.submit(f"paste{self.serial}", 30_000, 200)

    def step(self) -> float:
        result = self.sim.step()
        self.tokens += len(result.decoded) + len(result.started)
        for record in result.finished:
            conversation = self.conversation_of.pop(record.request_id, None)
            if conversation is not None:
                self.turn(conversation)
        every = self.workload.long_prompt_every_s
        if every and self.sim.now_s >= self.next_long_s:
            self.long_prompt()
            self.next_long_s = self.sim.now_s + every
        return result.duration_s


def measure(workload: Workload, steps: int, seed: int) -> dict:
    rng = random.Random(seed)
    driver = Driver(ReplicaSim(workload.preset), rng, workload)
    for _ in range(workload.answers):
        driver.turn()
    while driver.sim.now_s < WARM_UP_S:  # untimed
        driver.step()
    gc.collect()
    step = driver.step
    virtual_start, tokens_start = driver.sim.now_s, driver.tokens
    start = time.perf_counter()
    for _ in range(steps):
        step()
    wall = time.perf_counter() - start
    virtual = driver.sim.now_s - virtual_start
    load = driver.sim.load()
    return {
        "steps": steps,
        "steps_per_s": round(steps / wall),
        "us_per_step": round(wall / steps * 1e6, 2),
        "sim_step_ms": round(virtual / steps * 1000, 2),
        "running": load.running_requests,
        "prefix_hit_rate": round(load.prefix_hit_rate, 3),
        "kv_usage": round(load.kv_usage, 3),
        "virtual_s_per_wall_s": round(virtual / wall, 1),
        "tokens_per_s_per_answer": round(
            (driver.tokens - tokens_start) / virtual / workload.answers, 1
        ),
    }


def table(results: dict[str, dict]) -> list[str]:
    lines = [
        f"{'workload':<32} {'steps':>7} {'steps/s':>9} {'us/step':>8} {'sim ms/step':>12} "
        f"{'running':>8} {'tok/s/answer':>12} {'prefix hit':>10} {'KV use':>7} {'sim s/s':>8}"
    ]
    for name, r in results.items():
        lines.append(
            f"{name:<32} {r['steps']:>7} {r['steps_per_s']:>9,} {r['us_per_step']:>8.2f} "
            f"{r['sim_step_ms']:>12.2f} {r['running']:>8} {r['tokens_per_s_per_answer']:>12.1f} "
            f"{r['prefix_hit_rate']:>10.1%} "
            f"{r['kv_usage']:>7.1%} {r['virtual_s_per_wall_s']:>8.1f}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cpu = pin_to_one_core()
    results = {w.name: measure(w, args.steps, args.seed) for w in WORKLOADS}
    goal = results[WORKLOADS[0].name]
    met = goal["steps_per_s"] >= GOAL_STEPS_PER_S
    lines = [
        f"sim: domain.replica_sim.ReplicaSim, {args.steps:,} timed steps a workload after "
        f"{WARM_UP_S:.0f} simulated s of warm-up; "
        f"{'CPU ' + str(cpu) if cpu is not None else 'unpinned'}, "
        f"Python {platform.python_version()}",
        *table(results),
        f"goal at about 100 answers (>= {GOAL_STEPS_PER_S:,} replica-steps/s on one core): "
        f"{'met' if met else 'NOT met'} with {goal['steps_per_s']:,} steps/s",
    ]
    result = {
        "bench": "sim",
        "cpu": cpu,
        "steps": args.steps,
        "goal_steps_per_s": GOAL_STEPS_PER_S,
        "goal_met": met,
        "workloads": results,
    }
    lines.append(json.dumps(result))
    text = "\n".join(lines)
    publish("sim", text)


if __name__ == "__main__":
    main()
