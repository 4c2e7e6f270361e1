"""How fast the fleet simulator runs a whole region, and how its cost grows with the fleet.

    .venv/bin/python bench/sim_region.py [--duration 600] [--growth-duration 60] [--skip-full]
                                         [--interpreted]
    .venv/bin/python bench/sim_region.py --regions [--duration 60] [--growth-duration 30]
                                         [--largest 0.5]

Goal (docs/decisions.md, "Performance goals"): a region of 1,500 GPUs (226 replicas of 70B on
4 H100s, 566 of 8B on one) at 7,000 messages/s (twice its planned peak: the "GPUs run out"
scenario with every rung of the ladder) for 10 simulated minutes in under 10 real minutes, on
one core.

The simulator runs compiled (fleet/compiled.py: the same sources built with mypyc into
build/sim-mypyc, about a minute the first time, reused while no source changes); every
measurement runs in a fresh process that imports the compiled modules and checks it did.
`--interpreted` measures the plain modules instead. Steps:
1. side by side: the same run at 1/10 for `--growth-duration` simulated s, interpreted and
   compiled at once on the two cores (then the cores swapped): the speed-up, and whether both
   recorded the very same simulation (Recorder.fingerprint);
2. growth: 1/20, 1/10, 1/4, 1/2 and the full region for `--growth-duration` simulated s: CPU
   seconds per simulated second against the fleet's size (CPU, not wall: the machine is
   shared), and the slope of log(cost) over log(size) (1.0: linear);
3. the full region for `--duration` simulated s: the goal.
Prints a table and ends with one JSON line; results land in bench/results/sim_region.txt. Not
part of `make test` (tests/fleet/test_compiled.py checks the compiled build at small scale).

`--regions` measures five regions instead (fleet/region_scenarios.py, "five-regions": ten times
the users, 14,700 GPUs, about 34,700 messages/s at full scale, new conversations spilling from
the full region): the growth series at 1/20, 1/10 and 1/4 for `--growth-duration` simulated s,
then `--largest` (a share of every region) for `--duration` simulated s, compiled and on one
core, and how far 10 simulated minutes of all five are from 10 real ones (a goal for later):
the CPU seconds they project to, start included. Results: bench/results/sim_regions.txt.

Measured (bench/results/sim_region.txt): the full region's 600 simulated s in 336 CPU s (goal
met; 16 s of it the start), 79 us of one core per message over 4.07 million messages, cost
~ GPUs^1.07 (load average 9.7 on the 2 CPUs); side by side at 1/10 the compiled simulator runs
2.4x the interpreted one and records the same simulation. The run before the simulated gateway
ran the router took 530 CPU s in an earlier session; both versions on this session's machine,
the full region for 40 simulated s: 84-113 us a message before, 90-94 after, the start 8-12 CPU s
before and 15-17 after (the conversations under way are routed through their earlier turns).
Interpreted, the full run took 1,114 CPU s two sessions before. What got it there, besides
compiling: events in per-tick buckets (fleet/events.py) instead of one heap of half a million,
the prefix cache remembering its LRUs' ends, module constants marked Final and the per-message
records built by compiled __init__s; each checked to leave the simulation's fingerprint
unchanged.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchkit import pin_to_one_core, publish

from fleet import compiled
from fleet.region import FleetSim
from fleet.region_scenarios import build_regions
from fleet.scenarios import SCENARIOS, Variant, _scaled
from fleet.workload import Workload

GOAL_WALL_S = 600.0
SCALES = (0.05, 0.1, 0.25, 0.5, 1.0)
REGION_SCALES = (0.05, 0.1, 0.25)


def region() -> Variant:
    scenario = SCENARIOS["gpus-run-out"]
    return next(v for v in scenario.variants if v.label == "rungs 1-3")


def measure(scale: float, duration_s: float, seed: int) -> dict[str, object]:
    variant = region()
    pools = _scaled(variant.config.pools, scale)
    config = dataclasses.replace(variant.config, pools=pools)
    sim = FleetSim(config, Workload(variant.workload, seed, scale), duration_s)
    gc.collect()
    # On a shared machine the wall clock also counts other processes' turns on the core;
    # the process's own CPU time is what the simulation costs.
    started, cpu_started = time.perf_counter(), time.process_time()
    sim.prepare()  # the conversations under way at time 0, and their caches: a one-off
    start_cpu = time.process_time() - cpu_started
    recorder = sim.run()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    return {
        "scale": scale,
        "replicas": sum(p.replicas for p in pools),
        "gpus": sum(p.replicas * p.preset.gpus for p in pools),
        "simulated_s": duration_s,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "start_cpu_s": round(start_cpu, 1),
        "cpu_per_simulated_s": round((cpu - start_cpu) / duration_s, 3),
        "messages": len(recorder.outcome),
        "us_per_message": round((cpu - start_cpu) / max(1, len(recorder.outcome)) * 1e6, 1),
        "compiled": all(compiled.is_compiled(sys.modules[m]) for m in _HOT),
        "fingerprint": recorder.fingerprint()[:16],
    }


def measure_regions(scale: float, duration_s: float, seed: int) -> dict[str, object]:
    """The five regions at `scale` for `duration_s` simulated s, timed as `measure` times one."""
    _, sim, pools = build_regions("five-regions", scale, seed, None)
    sim.duration_s = duration_s
    for region in sim.regions:
        region.duration_s = duration_s
    gc.collect()
    started, cpu_started = time.perf_counter(), time.process_time()
    sim.prepare()
    start_cpu = time.process_time() - cpu_started
    recorders = sim.run()
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    messages = sum(len(r.outcome) for r in recorders)
    regions = len(sim.regions)
    return {
        "scale": scale,
        "replicas": regions * sum(p.replicas for p in pools),
        "gpus": regions * sum(p.replicas * p.preset.gpus for p in pools),
        "simulated_s": duration_s,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "start_cpu_s": round(start_cpu, 1),
        "cpu_per_simulated_s": round((cpu - start_cpu) / duration_s, 3),
        "messages": messages,
        "us_per_message": round((cpu - start_cpu) / max(1, messages) * 1e6, 1),
        "max_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 2),
        "compiled": all(compiled.is_compiled(sys.modules[m]) for m in (*_HOT, "fleet.regions")),
        "fingerprint": recorders[0].fingerprint()[:16],
    }


# Modules whose compiled form a worker checks it imported.
_HOT = ("domain.replica_sim", "domain.pool_index", "fleet.region", "fleet.replicas")


def in_worker(
    scale: float,
    duration_s: float,
    seed: int,
    build: Path | None,
    cpu: int | None,
    regions: bool = False,
) -> dict[str, object]:
    """One measurement in a fresh process: compiled when `build` is given (its directory first
    on the path), the plain modules otherwise; pinned to `cpu` when given."""
    env = dict(os.environ)
    # This checkout's modules, compiled or plain, whatever else the path or an install holds.
    env["PYTHONPATH"] = str(build if build is not None else compiled.REPO)
    job = json.dumps(
        {"scale": scale, "duration_s": duration_s, "seed": seed, "cpu": cpu, "regions": regions}
    )
    done = subprocess.run(
        [sys.executable, __file__, "--worker", job],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker failed ({done.returncode}):\n{done.stderr[-3000:]}")
    row = json.loads(done.stdout.strip().splitlines()[-1])
    if row["compiled"] != (build is not None):
        raise RuntimeError(f"worker ran {'compiled' if row['compiled'] else 'interpreted'} code")
    return row


def worker(job: str) -> None:
    params = json.loads(job)
    if params["cpu"] is not None:
        os.sched_setaffinity(0, {params["cpu"]})
    how = measure_regions if params.get("regions") else measure
    print(json.dumps(how(params["scale"], params["duration_s"], params["seed"])))


def side_by_side(duration_s: float, seed: int, build: Path) -> dict[str, object]:
    """Interpreted and compiled at once, one on each core, then the cores swapped: both see
    the same machine. Needs two cores; with one they run in turn."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pairs = []
    for swap in (False, True):
        first, second = (cpus[0], cpus[1]) if len(cpus) > 1 else (None, None)
        if swap:
            first, second = second, first
        with ThreadPoolExecutor(2) as pool:
            plain = pool.submit(in_worker, 0.1, duration_s, seed, None, first)
            fast = pool.submit(in_worker, 0.1, duration_s, seed, build, second)
            pairs.append((plain.result(), fast.result()))
    plain_us = [p["us_per_message"] for p, _ in pairs]
    fast_us = [f["us_per_message"] for _, f in pairs]
    return {
        "interpreted_us_per_message": plain_us,
        "compiled_us_per_message": fast_us,
        "speedup": round(sum(plain_us) / sum(fast_us), 2),
        "same_simulation": all(p["fingerprint"] == f["fingerprint"] for p, f in pairs),
        "messages": pairs[0][0]["messages"],
    }


def slope(rows: list[dict[str, float]]) -> float:
    """Least-squares slope of log(CPU s per simulated s, past the start) on log(GPUs)."""
    xs = [math.log(r["gpus"]) for r in rows]
    ys = [math.log(r["cpu_per_simulated_s"]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def table(rows: list[dict[str, float]]) -> list[str]:
    lines = [
        f"{'scale':>6} {'replicas':>8} {'GPUs':>6} {'sim s':>6} {'wall s':>8} {'CPU s':>8} "
        f"{'start':>7} {'CPU/sim s':>10} {'messages':>10} {'CPU us/msg':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r['scale']:>6.2f} {r['replicas']:>8} {r['gpus']:>6} {r['simulated_s']:>6.0f} "
            f"{r['wall_s']:>8.1f} {r['cpu_s']:>8.1f} {r['start_cpu_s']:>7.1f} "
            f"{r['cpu_per_simulated_s']:>10.3f} {r['messages']:>10,} {r['us_per_message']:>10.1f}"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, help="default 600 (--regions: 60)")
    parser.add_argument("--growth-duration", type=float, help="default 60 (--regions: 30)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-full", action="store_true", help="only the growth series")
    parser.add_argument("--interpreted", action="store_true", help="the plain modules")
    parser.add_argument("--regions", action="store_true", help="five regions (module notes)")
    parser.add_argument(
        "--largest", type=float, default=0.5, help="with --regions: the largest share measured"
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker)
    if args.regions:
        return regions_main(args)
    args.duration = args.duration or 600.0
    args.growth_duration = args.growth_duration or 60.0
    build = None
    lines = []
    if not args.interpreted:
        try:
            done = compiled.build()
        except compiled.BuildError as error:
            sys.exit(f"sim_region: {error}\n(--interpreted runs the plain modules)")
        build = done.path
        lines.append(
            f"compiled with mypyc into {done.path.relative_to(compiled.REPO)}: "
            + (f"built in {done.seconds:.0f} s" if done.built else "up to date, reused")
        )
        pair = side_by_side(args.growth_duration, args.seed, build)
    cpu = pin_to_one_core()
    run = [in_worker(s, args.growth_duration, args.seed, build, cpu) for s in SCALES]
    growth = [{k: v for k, v in r.items() if k not in ("compiled", "fingerprint")} for r in run]
    grows = slope(growth)
    full = None
    if not args.skip_full:
        full = in_worker(1.0, args.duration, args.seed, build, cpu)
        full = {k: v for k, v in full.items() if k not in ("compiled", "fingerprint")}
    last = growth[-1]
    projected = last["start_cpu_s"] + last["cpu_per_simulated_s"] * args.duration
    met = full is not None and full["cpu_s"] <= GOAL_WALL_S
    mode = "compiled (mypyc)" if build else "interpreted"
    lines.insert(
        0,
        f"sim_region: fleet.FleetSim, 'gpus-run-out' with rungs 1-3 (7,000 messages/s at full "
        f"scale), {mode}; {'CPU ' + str(cpu) if cpu is not None else 'unpinned'}, "
        f"Python {platform.python_version()}",
    )
    if build is not None:
        lines.append(
            f"side by side at 1/10, {args.growth_duration:.0f} simulated s "
            f"({pair['messages']:,} messages), both at once, cores swapped between the pairs: "
            f"interpreted {' / '.join(f'{u:.1f}' for u in pair['interpreted_us_per_message'])} "
            f"us per message, compiled "
            f"{' / '.join(f'{u:.1f}' for u in pair['compiled_us_per_message'])}: "
            f"{pair['speedup']:.2f}x; the same simulation: "
            f"{'yes' if pair['same_simulation'] else 'NO (the fingerprints differ)'}"
        )
    lines += [
        f"growth, {args.growth_duration:.0f} simulated s each (start: CPU s to set up the "
        f"conversations under way; CPU/sim s and us/msg: the simulated seconds after it):",
        *table(growth),
        f"cost grows as GPUs^{grows:.2f}; the full region projects to {projected:.0f} CPU s "
        f"(start + CPU/sim s x {args.duration:.0f}) for {args.duration:.0f} simulated s "
        f"(load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs: wall s include other processes' turns)",
    ]
    if full is not None:
        lines += ["full region:", *table([full])]
        lines.append(
            f"goal ({args.duration:.0f} simulated s under {GOAL_WALL_S:.0f} s of one core): "
            f"{'met' if met else 'NOT met'} in {full['cpu_s']:.0f} CPU s "
            f"({full['wall_s']:.0f} s wall)"
        )
    result = {
        "bench": "sim_region",
        "mode": "compiled" if build else "interpreted",
        "cpu": cpu,
        "goal_wall_s": GOAL_WALL_S,
        "goal_met": met,
        "side_by_side": pair if build is not None else None,
        "cost_exponent": round(grows, 3),
        "projected_full_cpu_s": round(projected),
        "growth": growth,
        "full": full,
    }
    lines.append(json.dumps(result))
    publish("sim_region" if build else "sim_region_interpreted", "\n".join(lines))
    return None


def regions_main(args: argparse.Namespace) -> None:
    """Five regions, compiled, on one core: the growth series, then the largest share."""
    try:
        done = compiled.build()
    except compiled.BuildError as error:
        sys.exit(f"sim_region: {error}")
    cpu = pin_to_one_core()
    growth_s = args.growth_duration or 30.0
    duration = args.duration or 60.0
    run = [in_worker(s, growth_s, args.seed, done.path, cpu, True) for s in REGION_SCALES]
    largest = in_worker(args.largest, duration, args.seed, done.path, cpu, True)
    rows = [{k: v for k, v in r.items() if k not in ("compiled", "fingerprint")} for r in run]
    top = {k: v for k, v in largest.items() if k not in ("compiled", "fingerprint")}
    grows = slope([*rows, top])
    # Ten simulated minutes of the whole five regions, from the largest share measured: its
    # start and its CPU per simulated second, grown to full scale at the measured exponent.
    factor = (1.0 / args.largest) ** grows
    projected = (top["start_cpu_s"] + top["cpu_per_simulated_s"] * GOAL_WALL_S) * factor
    lines = [
        f"sim_region --regions: fleet.regions.RegionsSim, 'five-regions' (five regions of "
        f"2,939 GPUs, ten times the users: 34,722 messages/s at full scale), compiled (mypyc "
        f"into {done.path.relative_to(compiled.REPO)}: "
        + (f"built in {done.seconds:.0f} s" if done.built else "up to date, reused")
        + f"); {'CPU ' + str(cpu) if cpu is not None else 'unpinned'}, Python "
        f"{platform.python_version()}",
        f"growth, {growth_s:.0f} simulated s each, then {args.largest:g} of every region for "
        f"{duration:.0f} simulated s:",
        *table([*rows, top]),
        f"cost grows as GPUs^{grows:.2f}; RSS at {args.largest:g}: {top['max_rss_gb']} GB",
        f"goal for later, 10 simulated minutes of the five full regions in 10 real ones: "
        f"projected {projected:,.0f} CPU s ({projected / GOAL_WALL_S:.1f}x the goal; load "
        f"average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)",
    ]
    result = {
        "bench": "sim_regions",
        "mode": "compiled",
        "cpu": cpu,
        "goal_wall_s": GOAL_WALL_S,
        "projected_full_cpu_s": round(projected),
        "times_the_goal": round(projected / GOAL_WALL_S, 2),
        "cost_exponent": round(grows, 3),
        "growth": rows,
        "largest": top,
    }
    lines.append(json.dumps(result))
    publish("sim_regions", "\n".join(lines))


if __name__ == "__main__":
    main()
