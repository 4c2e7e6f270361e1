"""The fleet simulator's core on small fleets: messages are answered, timed out or refused,
none is lost when a replica dies, and a system-prompt change throws the cache away."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

from domain.replica_hardware import H100_8B, H100x4_70B
from fleet.recorder import Outcome, Recorder, summarize
from fleet.region import Failures, FleetConfig, FleetSim
from fleet.replicas import PoolSpec, Strategy, prefill_gpu_s_per_token
from fleet.workload import Workload, WorkloadSpec

LARGE = PoolSpec("large", H100x4_70B, 4)
SMALL = PoolSpec("small", H100_8B, 6)


def run(config: FleetConfig, rate: float, duration_s: float, seed: int = 1) -> Recorder:
    workload = Workload(WorkloadSpec(peak_messages_per_s=rate), seed)
    return FleetSim(config, workload, duration_s).run()


def outcomes(recorder: Recorder) -> np.ndarray:
    return np.bincount(np.asarray(recorder.outcome), minlength=len(Outcome))


def test_a_fleet_within_its_capacity_answers_and_keeps_the_history_cached() -> None:
    recorder = run(FleetConfig((LARGE, SMALL)), rate=40, duration_s=60)
    counts = outcomes(recorder)
    assert counts[Outcome.ANSWERED] > 0.95 * counts.sum()
    assert counts[Outcome.TIMED_OUT] == counts[Outcome.LOST] == 0
    cost = {p.name: prefill_gpu_s_per_token(p.preset) for p in (LARGE, SMALL)}
    summary = summarize(recorder, 1.0, 20, 50, {"large": 16, "small": 6}, cost)
    # The caches start warm and stay so; the picker's escapes (charged to their replica's
    # queue between reports) give up a few percent of it.
    assert summary.history_cached_share > 0.75
    assert summary.tiers["plus"].ttft_p95_s < 1.0
    assert 20 < summary.tiers["free"].tokens_per_s_p50 < 120


def test_the_same_seed_gives_the_same_run() -> None:
    config = FleetConfig((LARGE,))
    first, second = run(config, 15, 20, seed=4), run(config, 15, 20, seed=4)
    assert first.outcome == second.outcome
    assert np.array_equal(np.asarray(first.ttft_s), np.asarray(second.ttft_s), equal_nan=True)


def test_an_overloaded_pool_times_out_what_cannot_start_and_paid_first_protects_plus() -> None:
    def plus_and_free(paid_first: bool) -> tuple[float, float]:
        # Affine picks keep prefill small, so the batch's KV room is what runs out and the
        # queue's order decides who gets in. (Under round-robin the re-read prompts, all
        # admitted already, are what waits, and they are read in order of admission.)
        recorder = run(
            FleetConfig((LARGE,), Strategy.FAVOURITE, paid_first=paid_first, max_rung=0),
            rate=60,
            duration_s=60,
        )
        rows = recorder.rows()
        late = rows["arrival_s"] > 20
        timed_out = rows["outcome"] == Outcome.TIMED_OUT
        plus = rows["tier"] == 1
        return timed_out[late & plus].mean(), timed_out[late & ~plus].mean()

    plus_fifo, free_fifo = plus_and_free(paid_first=False)
    assert free_fifo > 0.1 and abs(plus_fifo - free_fifo) < 0.1  # one queue: all alike
    plus_first, free_first = plus_and_free(paid_first=True)
    assert plus_first < plus_fifo / 2 and free_first > free_fifo


def test_a_dead_replicas_answers_move_after_detection_and_none_is_lost() -> None:
    config = FleetConfig((LARGE,), Strategy.FAVOURITE, failures=Failures(kill_at_s=(30.0,)))
    recorder = run(config, rate=12, duration_s=60)  # the survivors have room for a quarter more
    assert recorder.moves, "the replica held answers when it died"
    pauses = [pause for _, pause, _ in recorder.moves]
    assert all(killed_at == 30.0 and streamed > 0 for killed_at, _, streamed in recorder.moves)
    # The scheduler notices after 2 s; then the three survivors re-read a quarter of the fleet's
    # answers at once, so the last of them wait behind the others' prompts.
    assert min(pauses) >= config.detection_s
    assert float(np.median(pauses)) < config.detection_s + 1.5 and max(pauses) < 8.0
    assert outcomes(recorder)[Outcome.LOST] == 0


def test_a_system_prompt_change_sends_prefill_up_until_the_caches_refill() -> None:
    config = FleetConfig((LARGE,), Strategy.FAVOURITE, failures=Failures(flush_at_s=(40.0,)))
    recorder = run(config, rate=15, duration_s=80)
    prefill = recorder.series["prefill:large"]
    assert prefill[40:60].mean() > 3 * prefill[20:40].mean()


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_spreads_a_pool_and_loses_nothing(strategy: Strategy) -> None:
    recorder = run(FleetConfig((LARGE,), strategy), rate=10, duration_s=30)
    counts = outcomes(recorder)
    assert counts[Outcome.ANSWERED] > 0 and counts[Outcome.LOST] == 0
    assert not math.isnan(recorder.rows()["ttft_s"][0])


def test_a_run_leaves_no_reference_cycles_and_the_collector_as_it_was() -> None:
    # The run pauses the cycle collector (too slow over a region's millions of objects); that
    # is only sound while everything it makes is freed by reference counting alone.
    config = FleetConfig((LARGE, SMALL), failures=Failures(kill_at_s=(10.0,), flush_at_s=(15.0,)))
    gc.collect()
    assert gc.isenabled()
    gc.disable()
    try:
        run(config, rate=30, duration_s=20)
        assert gc.collect() == 0
    finally:
        gc.enable()
    run(config, rate=5, duration_s=2)
    assert gc.isenabled()


def test_with_every_large_replica_dead_large_messages_fall_back_to_small() -> None:
    one_large = PoolSpec("large", H100x4_70B, 1)
    config = FleetConfig((one_large, SMALL), failures=Failures(kill_at_s=(20.0,)))
    recorder = run(config, rate=20, duration_s=60)
    rows = recorder.rows()
    noticed = rows["arrival_s"] > 20.0 + config.detection_s
    on_large = rows["pool"] == recorder.pools.index("large")
    assert on_large[rows["arrival_s"] < 20.0].any(), "the large pool served before it died"
    assert not on_large[noticed].any()
    assert not (rows["outcome"] == Outcome.NO_REPLICA).any()
    # Answers under way on the dead replica have no survivor of their pool to move to: a
    # failover picks in the message's pool only (gateway/answers.py), so they are lost.
    lost = rows["outcome"] == Outcome.LOST
    assert lost.any() and (rows["arrival_s"][lost] < 20.0).all()
