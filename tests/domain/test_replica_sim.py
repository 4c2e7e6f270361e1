"""The replica simulator against sizing 000: its step loop, its memory, its single-server case."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from domain.replica_hardware import BLOCK_TOKENS, H100x4_70B, ReplicaPreset, step_seconds
from domain.replica_requests import StepResult
from domain.replica_sim import ReplicaSim

WITHIN = 0.20  # sizing 000's figures within 20 %


def tiny(blocks: int, host_blocks: int = 0) -> ReplicaPreset:
    """The 70B with room for only `blocks` KV blocks on the GPUs, to make memory run out."""
    block_bytes = BLOCK_TOKENS * H100x4_70B.kv_bytes_per_token
    return dataclasses.replace(
        H100x4_70B, kv_cache_bytes=blocks * block_bytes, host_kv_bytes=host_blocks * block_bytes
    )


def run_until(sim: ReplicaSim, done, limit: int = 100_000) -> list[StepResult]:
    results = []
    for _ in range(limit):
        results.append(sim.step())
        if done(results[-1]):
            return results
    raise AssertionError("the condition never came true")


def finished_ids(result: StepResult) -> set[str]:
    return {f.request_id for f in result.finished}


def near(value: float, spec: float) -> bool:
    return abs(value - spec) <= WITHIN * spec


def test_the_single_server_case_of_spec_000() -> None:
    """A 30,000-token prompt arrives at a server streaming 99 answers: about 70 chunks, the
    others slow from about 30 to about 20 tokens/s but never stop, first token after ~3.5 s."""
    sim = ReplicaSim(H100x4_70B)
    others = {f"r{i}" for i in range(99)}
    for request_id in sorted(others):
        sim.submit(request_id, 3_000, 1_000)
    run_until(sim, lambda r: not sim.load().queued_prefill_tokens and not r.prefilled)
    steady = run_until(sim, lambda r: r.step % 40 == 0)
    steady_rate = sum(len(r.decoded) for r in steady) / 99 / sum(r.duration_s for r in steady)

    sim.submit("document", 30_000, 50)
    during = run_until(sim, lambda r: "document" in r.started)
    chunks = [tokens for r in during for rid, tokens in r.prefilled if rid == "document"]
    elapsed = sum(r.duration_s for r in during)
    slowed_rate = sum(len(r.decoded) for r in during) / 99 / elapsed

    assert sum(chunks) == 30_000 and max(chunks) <= 512
    assert near(len(chunks), 70), len(chunks)
    assert near(steady_rate, 30), steady_rate
    assert near(slowed_rate, 20), slowed_rate
    assert all(set(r.decoded) == others for r in during)  # never stop
    assert near(elapsed, 3.5), elapsed
    finish = run_until(sim, lambda r: "document" in finished_ids(r))[-1].finished
    record = next(f for f in finish if f.request_id == "document")
    assert near(record.first_token_s - record.submitted_s, 3.5)


def test_every_running_answer_gets_its_token_before_prompts_are_read() -> None:
    sim = ReplicaSim(H100x4_70B)
    for i in range(10):
        sim.submit(f"a{i}", 20, 500)
    run_until(sim, lambda r: len(r.decoded) == 10)
    sim.submit("long", 5_000, 5)
    result = sim.step()
    assert len(result.decoded) == 10
    assert result.prefilled == (("long", 512 - 10),)
    assert result.duration_s == pytest.approx(step_seconds(H100x4_70B, 512, 10 * 30 + 502), 1e-3)


def test_paid_requests_are_admitted_before_free_ones() -> None:
    sim = ReplicaSim(tiny(blocks=64))
    sim.submit("runner", 600, 10)  # 38 blocks
    sim.step()
    sim.submit("free", 500, 5)  # 32 blocks: does not fit beside the runner
    sim.submit("paid", 600, 5, paid=True)  # 38 blocks, arrived later
    admitted = [rid for r in run_until(sim, lambda r: r.admitted) for rid in r.admitted]
    assert admitted == ["paid"]  # the free one, first in line by arrival, still waits
    assert sim.load().waiting_requests == 1
    results = run_until(sim, lambda r: "free" in r.admitted)
    assert any("paid" in finished_ids(r) for r in results)


def test_paid_prompts_are_read_first_when_both_fit() -> None:
    sim = ReplicaSim(H100x4_70B)
    sim.submit("free", 1_000, 5)
    sim.submit("paid", 1_000, 5, paid=True)
    result = sim.step()
    assert result.admitted == ("paid", "free")
    assert result.prefilled == (("paid", 512),)


def test_a_head_that_does_not_fit_blocks_the_queue() -> None:
    sim = ReplicaSim(tiny(blocks=64))
    sim.submit("runner", 600, 30)  # 38 blocks
    sim.step()
    sim.submit("big", 800, 5)  # 51 blocks: waits for the runner
    sim.submit("small", 100, 5)  # 7 blocks would fit now, but must not jump the queue
    before_finish = run_until(sim, lambda r: "runner" in finished_ids(r))
    assert not any(r.admitted for r in before_finish)
    assert sim.load().waiting_requests == 2
    assert sim.step().admitted == ("big", "small")


def test_no_more_answers_run_at_once_than_the_batch_limit() -> None:
    sim = ReplicaSim(dataclasses.replace(H100x4_70B, max_running=2))
    sim.submit("a", 100, 5)
    sim.submit("b", 100, 50)
    sim.submit("c", 100, 5, paid=True)  # paid goes first, but only two places exist
    assert sim.step().admitted == ("c", "a")
    assert sim.load().waiting_requests == 1  # b waits with memory to spare
    results = run_until(sim, lambda r: "b" in r.admitted)
    assert any(finished_ids(r) & {"a", "c"} for r in results)  # a place opened first
    assert sim.load().running_requests <= 2
    # Its quiet stretches jump ahead the same way: fast_forward admits nobody either.
    sim.submit("d", 100, 5)
    sim.fast_forward(sim.now_s + 0.05)
    assert sim.load().running_requests <= 2


def test_a_finished_answer_frees_its_blocks_at_once() -> None:
    sim = ReplicaSim(tiny(blocks=64))
    capacity = sim.load().kv_capacity_tokens
    sim.submit("one", 700, 40)
    run_until(sim, lambda r: bool(r.decoded))
    busy = sim.load()
    assert busy.kv_usage > 0.6 and busy.free_kv_tokens < capacity * 0.4
    assert busy.running_requests == 1
    last = run_until(sim, lambda r: bool(r.finished))[-1]
    (record,) = last.finished
    assert record.output_tokens == 40 and not record.cancelled
    idle = sim.load()
    assert idle.kv_usage == 0 and idle.free_kv_tokens == capacity
    assert idle.running_requests == idle.waiting_requests == 0
    assert sim.idle and sim.step().idle


def test_cancel_frees_blocks_and_reports_the_tokens_written() -> None:
    sim = ReplicaSim(tiny(blocks=64))
    sim.submit("one", 300, 400)
    run_until(sim, lambda r: r.step == 12)
    assert sim.generated("one") == 12  # step 1 read the prompt and wrote the first token
    record = sim.cancel("one")
    assert record is not None and record.cancelled and record.output_tokens == 12
    assert sim.load().kv_usage == 0 and sim.idle
    assert sim.cancel("one") is None
    sim.submit("waiting", 300, 10)
    assert sim.cancel("waiting").output_tokens == 0
    assert sim.idle and sim.load().queued_prefill_tokens == 0


def test_a_repeated_conversation_prefix_is_read_from_cache() -> None:
    sim = ReplicaSim(H100x4_70B)
    sim.submit("turn1", 3_000, 400, conversation="c1")
    run_until(sim, lambda r: bool(r.finished))
    # The next turn: the whole first exchange, then 50 new tokens.
    sim.submit("turn2", 3_450, 20, conversation="c1")
    results = run_until(sim, lambda r: bool(r.finished))
    read = sum(tokens for r in results for _, tokens in r.prefilled)
    cached = (3_400 - 1) // BLOCK_TOKENS * BLOCK_TOKENS  # full blocks written by turn 1
    assert results[-1].finished[0].cached_tokens == cached
    assert read == 3_450 - cached
    assert sim.load().prefix_hit_rate == pytest.approx(cached / (3_000 + 3_450))
    # Another conversation shares nothing.
    sim.submit("other", 3_450, 5, conversation="c2")
    assert run_until(sim, lambda r: bool(r.finished))[-1].finished[0].cached_tokens == 0
    # A prompt that differs from the cached turn after 1,000 tokens reuses only those.
    sim.submit("turn3", 3_600, 5, conversation="c1", reusable_prefix_tokens=1_000)
    record = run_until(sim, lambda r: bool(r.finished))[-1].finished[0]
    assert record.cached_tokens == 1_000 // BLOCK_TOKENS * BLOCK_TOKENS


def test_conversations_that_open_alike_share_the_opening() -> None:
    sim = ReplicaSim(H100x4_70B)
    system = ("prompt-v1", 400)
    sim.submit("a", 500, 10, conversation="a", shared_prefix=system)
    first = run_until(sim, lambda r: bool(r.finished))[-1].finished[0]
    assert first.cached_tokens == 0  # the first reader computes it
    sim.submit("b", 700, 10, conversation="b", shared_prefix=system)
    results = run_until(sim, lambda r: bool(r.finished))
    assert results[-1].finished[0].cached_tokens == 400 // BLOCK_TOKENS * BLOCK_TOKENS
    assert sum(t for r in results for _, t in r.prefilled) == 700 - 400
    # A conversation's own cache counts when it holds more; a changed opening shares nothing.
    sim.submit("b2", 760, 10, conversation="b", shared_prefix=system)
    assert run_until(sim, lambda r: bool(r.finished))[-1].finished[0].cached_tokens == 704
    sim.submit("c", 700, 10, conversation="c", shared_prefix=("prompt-v2", 400))
    assert run_until(sim, lambda r: bool(r.finished))[-1].finished[0].cached_tokens == 0
    # Without the shared opening, nothing is shared across conversations.
    sim.submit("d", 700, 10, conversation="d")
    assert run_until(sim, lambda r: bool(r.finished))[-1].finished[0].cached_tokens == 0


def test_a_shared_opening_is_evicted_like_any_cached_run() -> None:
    sim = ReplicaSim(tiny(blocks=64))
    system = ("prompt-v1", 320)  # 20 blocks
    sim.submit("a", 400, 10, conversation="a", shared_prefix=system)
    run_until(sim, lambda r: bool(r.finished))
    # a's own run (25 blocks) and the opening (20) are cached; a 60-block prompt needs the
    # room of both, the least recently used first.
    sim.submit("big", 950, 10, conversation="big")
    run_until(sim, lambda r: bool(r.finished))
    sim.submit("b", 400, 10, conversation="b", shared_prefix=system)
    assert run_until(sim, lambda r: bool(r.finished))[-1].finished[0].cached_tokens == 0
    load = sim.load()
    assert load.free_kv_tokens == load.kv_capacity_tokens  # every block is free or evictable


def test_evicted_prefix_blocks_spill_to_host_ram_and_come_back() -> None:
    sim = ReplicaSim(tiny(blocks=64, host_blocks=200))
    sim.submit("c1-turn1", 600, 40, conversation="c1")
    run_until(sim, lambda r: bool(r.finished))
    assert sim.load().cached_kv_tokens == (640 - 1) // BLOCK_TOKENS * BLOCK_TOKENS
    sim.submit("c2", 900, 10, conversation="c2")  # needs the room
    run_until(sim, lambda r: bool(r.finished))
    assert sim.load().host_kv_tokens > 0
    sim.submit("c1-turn2", 660, 5, conversation="c1")
    first = sim.step()
    record = run_until(sim, lambda r: bool(r.finished))[-1].finished[0]
    assert record.cached_tokens == 39 * BLOCK_TOKENS  # all of turn 1's full blocks
    assert first.prefilled == (("c1-turn2", 660 - 39 * BLOCK_TOKENS),)
    # Blocks that came back over PCIe cost their copy time in the step that loaded them.
    gpu_only = step_seconds(sim.preset, 660 - 39 * 16, 660)
    assert first.duration_s > gpu_only


def test_without_a_host_tier_evicted_blocks_are_gone() -> None:
    sim = ReplicaSim(tiny(blocks=64))
    sim.submit("c1-turn1", 600, 40, conversation="c1")
    run_until(sim, lambda r: bool(r.finished))
    sim.submit("c2", 900, 10, conversation="c2")
    run_until(sim, lambda r: bool(r.finished))
    sim.submit("c1-turn2", 660, 5, conversation="c1")
    # c2 needed 57 of 64 blocks: 32 of turn 1's 39 cached blocks went, from the tail first, so
    # only its first 7 blocks are left to hit.
    assert run_until(sim, lambda r: bool(r.finished))[-1].finished[0].cached_tokens == 7 * 16


def test_answers_that_outgrow_memory_preempt_the_newest_free_request() -> None:
    sim = ReplicaSim(tiny(blocks=40))
    sim.submit("paid", 200, 300, paid=True)  # 13 blocks, grows to 32
    sim.submit("free", 200, 300)
    results = run_until(sim, lambda r: bool(r.preempted))
    assert results[-1].preempted == ("free",)
    done = run_until(sim, lambda r: "free" in finished_ids(r))
    outputs = {f.request_id: f.output_tokens for r in done for f in r.finished}
    assert outputs == {"paid": 300, "free": 300}  # the preempted answer resumed, losing nothing


def test_random_traffic_keeps_the_books_balanced() -> None:
    rng = random.Random(7)
    sim = ReplicaSim(tiny(blocks=300, host_blocks=100))
    capacity = sim.load().kv_capacity_tokens
    expected, got = {}, {}
    for step in range(4_000):
        if rng.random() < 0.2:
            rid, prompt, answer = f"q{step}", rng.randint(1, 2_000), rng.randint(1, 300)
            conversation = f"c{rng.randint(0, 20)}"
            # Some open with one of two shared system prompts, as after a prompt change.
            shared = (f"system-{rng.randint(0, 1)}", 320) if rng.random() < 0.5 else None
            sim.submit(rid, prompt, answer, paid=rng.random() < 0.3, conversation=conversation,
                       shared_prefix=shared)  # fmt: skip
            expected[rid] = answer
        if rng.random() < 0.02 and expected:
            victim = rng.choice(sorted(set(expected) - set(got)) or ["none"])
            if (record := sim.cancel(victim)) is not None:
                expected[victim] = got[victim] = record.output_tokens
        result = sim.step()
        if result.prefilled:  # the budget caps the step
            assert len(result.decoded) + sum(t for _, t in result.prefilled) <= 512
        for record in result.finished:
            got[record.request_id] = record.output_tokens
    for result in run_until(sim, lambda r: sim.idle):
        got.update((f.request_id, f.output_tokens) for f in result.finished)
    assert got == expected
    load = sim.load()
    assert load.free_kv_tokens == capacity and load.kv_usage == 0
    assert load.queued_prefill_tokens == 0 and 0 < load.prefix_hit_rate < 1


def test_submit_refuses_what_can_never_fit() -> None:
    sim = ReplicaSim(tiny(blocks=10))
    with pytest.raises(ValueError, match="do not fit"):
        sim.submit("huge", 150, 20)
    sim.submit("ok", 100, 10)
    with pytest.raises(ValueError, match="already"):
        sim.submit("ok", 100, 10)


def drive(sim: ReplicaSim, fast: bool, seed: int) -> tuple[list, list[float]]:
    """Random arrivals and cancels at event times; between events the replica steps up to the
    next one, one step at a time or with fast_forward taking the quiet stretches."""
    rng = random.Random(seed)
    records, clocks = [], []
    now = 0.0
    for event in range(600):
        now += rng.expovariate(8.0)
        while sim.now_s < now:
            if fast and sim.fast_forward(now) and sim.now_s >= now:
                break
            if sim.idle:
                sim.now_s = max(sim.now_s, now)  # what fast_forward does when idle
                break
            records.extend(sim.step().finished)
        clocks.append(sim.now_s)
        if rng.random() < 0.05 and (cancelled := sim.cancel(f"q{rng.randrange(event + 1)}")):
            records.append(cancelled)
        prompt, answer = rng.randint(1, 3_000), rng.randint(1, 400)
        conversation = f"c{rng.randint(0, 30)}"
        sim.submit(f"q{event}", prompt, answer, paid=rng.random() < 0.3, conversation=conversation)
    while not sim.idle:
        if not (fast and sim.fast_forward(math.inf)):
            records.extend(sim.step().finished)
    return records, clocks


@pytest.mark.parametrize(
    "preset",
    # Roomy (long quiet stretches), and small enough that memory runs out: preemptions and
    # blocked heads end the stretches.
    [H100x4_70B, tiny(blocks=900, host_blocks=200)],
    ids=["roomy", "tight"],
)
def test_fast_forward_equals_stepping_one_by_one(preset: ReplicaPreset) -> None:
    slow, fast = ReplicaSim(preset), ReplicaSim(preset)
    assert drive(fast, fast=True, seed=3) == drive(slow, fast=False, seed=3)
    assert fast.now_s == slow.now_s and fast.load() == slow.load()


def test_fast_forward_takes_whole_decode_stretches_and_waits_when_idle() -> None:
    sim = ReplicaSim(H100x4_70B)
    assert sim.fast_forward(5.0) == 0 and sim.now_s == 5.0  # idle: the clock moves on
    sim.submit("a", 1_000, 300)
    assert sim.fast_forward(6.0) == 0  # a prompt to read: step() does that
    sim.step(), sim.step()  # two chunks of prompt; the second yields the first token
    taken = sim.fast_forward(math.inf)
    assert taken == 298  # every step up to the one that writes the last token
    assert [f.output_tokens for f in sim.step().finished] == [300]
    assert sim.idle


def test_a_warmed_prefix_is_read_from_cache_like_a_finished_turn() -> None:
    sim = ReplicaSim(tiny(blocks=400, host_blocks=100))
    assert sim.warm_prefix("c1", 2_000) == 2_000  # 125 whole blocks
    assert sim.warm_prefix("c2", 1_024 + 7) == 1_024  # a partial block is not kept
    assert sim.load().cached_kv_tokens == 3_024
    sim.submit("next", 2_100, 5, conversation="c1")
    finished = run_until(sim, lambda r: bool(r.finished))[-1].finished
    assert finished[0].cached_tokens == 2_000
    # A warm-up bigger than the memory keeps what fits, spilling older runs to host RAM.
    assert sim.warm_prefix("c3", 10_000) == 400 * BLOCK_TOKENS
    assert sim.load().host_kv_tokens > 0
