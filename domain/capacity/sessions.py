"""Sizing 002: the fleet from the KV-cache bytes each resident conversation holds, the 8B's
capacity per GPU, and the lever table (the same sizing with one input changed per row)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from domain.capacity.inputs import (
    DAYS_PER_YEAR,
    GB,
    HOURS_PER_DAY,
    SECONDS_PER_DAY,
    TB,
    PlanInputError,
    SessionInputs,
    kv_bytes_per_token,
)


@dataclass(frozen=True, slots=True)
class NodeMemory:
    kv_bytes_per_token: float
    kv_budget_gb: float
    context_tokens: float
    session_gb: float
    sessions_naive: float
    prefix_gb: float
    conversation_gb: float
    sessions_shared: float


@dataclass(frozen=True, slots=True)
class SlotTime:
    generation_s: float
    warm_hit_rate: float
    wait_s: float
    slot_s_per_turn: float
    session_s: float
    slot_s_per_session: float
    duty_cycle: float


@dataclass(frozen=True, slots=True)
class SessionFleet:
    sessions_per_node: float
    sessions_per_day: float
    arrivals_per_s: float
    concurrent_avg: float
    concurrent_peak: float
    nodes: float
    gpus: float
    dollars_per_day: float
    dollars_per_year: float
    turns_per_day: float
    dollars_per_turn: float
    dollars_per_user_month: float


@dataclass(frozen=True, slots=True)
class DecodeCheck:
    decoding_per_node: float
    gb_read_per_gpu_step: float
    step_ms: float
    tokens_per_s: float
    bandwidth_ceiling_per_node: float


@dataclass(frozen=True, slots=True)
class SmallModel:
    kv_bytes_per_token: float
    kv_budget_gb: float
    concurrent_per_gpu: float
    large_concurrent_per_gpu: float
    per_gpu_ratio: float


@dataclass(frozen=True, slots=True)
class LeverRow:
    lever: str
    change: str
    concurrent_per_gpu: float
    gpus: float
    dollars_per_year: float
    # Against the baseline row; negative when the row costs more than the baseline.
    saving_per_year: float


@dataclass(frozen=True, slots=True)
class SessionSizing:
    memory: NodeMemory
    slots: SlotTime
    fleet: SessionFleet
    decode: DecodeCheck


@dataclass(frozen=True, slots=True)
class SessionPlan:
    memory: NodeMemory
    slots: SlotTime
    fleet: SessionFleet
    decode: DecodeCheck
    small_model: SmallModel
    levers: tuple[LeverRow, ...]


def _node_memory(i: SessionInputs) -> NodeMemory:
    per_token = kv_bytes_per_token(i.layers, i.kv_heads, i.head_dim, i.kv_bytes_per_element)
    budget_gb = i.replica_gpus * (i.gpu_memory_gb - i.activations_gb_per_gpu) - i.weights_gb
    context = i.prefix_tokens + i.conversation_tokens
    session_gb = context * per_token / GB
    prefix_gb = i.prefix_tokens * per_token / GB
    if prefix_gb >= budget_gb:
        raise PlanInputError(
            f"the shared prefix needs {prefix_gb:.3g} GB of KV cache, more than the node's "
            f"{budget_gb:.3g} GB budget"
        )
    conversation_gb = i.conversation_tokens * per_token / GB
    return NodeMemory(
        kv_bytes_per_token=per_token,
        kv_budget_gb=budget_gb,
        context_tokens=context,
        session_gb=session_gb,
        sessions_naive=budget_gb / session_gb,
        prefix_gb=prefix_gb,
        conversation_gb=conversation_gb,
        # Paged attention stores the never-modified prefix once per node, not once a session.
        sessions_shared=(budget_gb - prefix_gb) / conversation_gb,
    )


def _slot_time(i: SessionInputs) -> SlotTime:
    generation_s = i.answer_tokens / i.decode_tokens_per_s
    # With exponential think times, the share of gaps shorter than the TTL, i.e. of turns that
    # find the cache warm, and the mean time a slot waits, E[min(gap, TTL)].
    warm_hit_rate = 1 - math.exp(-i.ttl_s / i.think_time_s)
    wait_s = i.think_time_s * warm_hit_rate
    slot_s_per_turn = generation_s + wait_s
    session_s = i.turns_per_session * (generation_s + i.think_time_s)
    slot_s_per_session = i.turns_per_session * slot_s_per_turn
    return SlotTime(
        generation_s=generation_s,
        warm_hit_rate=warm_hit_rate,
        wait_s=wait_s,
        slot_s_per_turn=slot_s_per_turn,
        session_s=session_s,
        slot_s_per_session=slot_s_per_session,
        # A slot is free for the rest of the session, so it carries this many sessions at once.
        duty_cycle=session_s / slot_s_per_session,
    )


def _session_fleet(i: SessionInputs, per_node: float, session_s: float) -> SessionFleet:
    sessions_per_day = i.daily_users * i.sessions_per_user
    arrivals = sessions_per_day / SECONDS_PER_DAY
    average = arrivals * session_s  # Little's law: L = lambda x W
    peak = average * i.peak_factor
    nodes = peak / per_node
    gpus = nodes * i.replica_gpus
    per_day = gpus * HOURS_PER_DAY * i.gpu_dollars_per_hour
    turns_per_day = sessions_per_day * i.turns_per_session
    return SessionFleet(
        sessions_per_node=per_node,
        sessions_per_day=sessions_per_day,
        arrivals_per_s=arrivals,
        concurrent_avg=average,
        concurrent_peak=peak,
        nodes=nodes,
        gpus=gpus,
        dollars_per_day=per_day,
        dollars_per_year=per_day * DAYS_PER_YEAR,
        turns_per_day=turns_per_day,
        dollars_per_turn=per_day / turns_per_day,
        dollars_per_user_month=per_day * 30 / i.daily_users,
    )


def _decode_check(
    i: SessionInputs, memory: NodeMemory, slots: SlotTime, per_node: float
) -> DecodeCheck:
    # Decode is bandwidth-bound: each step reads the weights and every decoding session's whole
    # context (shared prefix pages are still read once per session that attends to them).
    decoding_share = slots.generation_s / slots.slot_s_per_turn
    decoding = per_node * decoding_share
    gb_per_gpu = (i.weights_gb + decoding * memory.session_gb) / i.replica_gpus
    step_s = gb_per_gpu * GB / (i.hbm_tb_per_s * TB)
    # Inverted: the most bytes a step may read and still stream at the target tokens/s.
    gb_allowed = i.hbm_tb_per_s * TB / i.decode_tokens_per_s / GB * i.replica_gpus
    ceiling = (gb_allowed - i.weights_gb) / memory.session_gb / decoding_share
    return DecodeCheck(
        decoding_per_node=decoding,
        gb_read_per_gpu_step=gb_per_gpu,
        step_ms=step_s * 1000,
        tokens_per_s=1 / step_s,
        bandwidth_ceiling_per_node=ceiling,
    )


def size_sessions(i: SessionInputs) -> SessionSizing:
    """Sizing 002's steps 1-7: KV bytes -> sessions per node -> Little's law -> GPUs -> $."""
    memory = _node_memory(i)
    slots = _slot_time(i)
    per_node = memory.sessions_shared * slots.duty_cycle
    fleet = _session_fleet(i, per_node, slots.session_s)
    return SessionSizing(memory, slots, fleet, _decode_check(i, memory, slots, per_node))


def _small_model(i: SessionInputs, large: SessionSizing) -> tuple[SmallModel, SessionSizing]:
    # The 8B fits on one GPU, so its "node" is a single GPU with the 8B's shape.
    small_inputs = replace(
        i,
        layers=i.small_layers,
        kv_heads=i.small_kv_heads,
        replica_gpus=1,
        weights_gb=i.small_weights_gb,
        activations_gb_per_gpu=i.small_activations_gb,
    )
    small = size_sessions(small_inputs)
    large_per_gpu = large.fleet.sessions_per_node / i.replica_gpus
    model = SmallModel(
        kv_bytes_per_token=small.memory.kv_bytes_per_token,
        kv_budget_gb=small.memory.kv_budget_gb,
        concurrent_per_gpu=small.fleet.sessions_per_node,
        large_concurrent_per_gpu=large_per_gpu,
        per_gpu_ratio=small.fleet.sessions_per_node / large_per_gpu,
    )
    return model, small


def _lever(name: str, change: str, gpus: float, price: float, base: SessionFleet) -> LeverRow:
    # Priced exactly as the baseline (GPUs x 24 h x $/h x 365), so its own row saves exactly 0.
    per_year = gpus * HOURS_PER_DAY * price * DAYS_PER_YEAR
    saving = base.dollars_per_year - per_year
    return LeverRow(name, change, base.concurrent_peak / gpus, gpus, per_year, saving)


def lever_table(i: SessionInputs, base: SessionSizing, small: SessionSizing) -> list[LeverRow]:
    """Sizing 002's lever table: the same sizing with one input changed per row."""
    peak = base.fleet.concurrent_peak
    unshared = base.memory.sessions_naive * base.slots.duty_cycle
    compacted = i.conversation_tokens - i.compaction_saved_tokens
    share = i.small_session_share
    routed = (1 - share) * base.fleet.gpus + share * small.fleet.gpus
    rows = [
        ("baseline", "GQA, fp16 KV, shared prefix, TTL", base.fleet.gpus),
        (
            "fp8 KV cache",
            f"KV bytes per element {i.kv_bytes_per_element:g} -> {i.kv_bytes_per_element / 2:g}",
            size_sessions(replace(i, kv_bytes_per_element=i.kv_bytes_per_element / 2)).fleet.gpus,
        ),
        (
            "MHA instead of GQA",
            f"KV heads {i.kv_heads} -> {i.query_heads}",
            size_sessions(replace(i, kv_heads=i.query_heads)).fleet.gpus,
        ),
        (
            "prefix not shared",
            "every session stores its own prefix",
            peak / unshared * i.replica_gpus,
        ),
        (
            "compaction",
            f"conversation tokens {i.conversation_tokens:,.0f} -> {compacted:,.0f}",
            size_sessions(replace(i, conversation_tokens=compacted)).fleet.gpus,
        ),
        ("route to 8B", f"{share:.0%} of sessions on the 8B, one GPU each", routed),
    ]
    price = i.gpu_dollars_per_hour
    return [_lever(name, change, gpus, price, base.fleet) for name, change, gpus in rows]


def plan_sessions(i: SessionInputs) -> SessionPlan:
    """Sizing 002's sizing, the 8B's per-GPU capacity, and the lever table."""
    base = size_sessions(i)
    small_model, small = _small_model(i, base)
    return SessionPlan(
        memory=base.memory,
        slots=base.slots,
        fleet=base.fleet,
        decode=base.decode,
        small_model=small_model,
        levers=tuple(lever_table(i, base, small)),
    )
