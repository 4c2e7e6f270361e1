"""`chatctl plan`: size a GPU fleet from tokens, after the two sizing specifications.

Preset 000 sizes from messages: traffic times the GPU-seconds one message costs (prefill of
the uncached prompt plus decode of the answer), for a 70B model with 8B routing. Preset 002 sizes
from KV-cache bytes: how many conversations fit in a node's free GPU memory, stretched by the TTL
duty cycle, against the peak concurrency that Little's law gives; then the lever table.

The calculation is pure (dataclasses in, dataclasses out); only `add_plan_parser` and `run_plan`
touch arguments and stdout. Every value stays unrounded until it is printed: rounding an
intermediate figure (nodes, say) is how two results of one derivation stop reconciling.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import Field, asdict, dataclass, fields, replace
from operator import attrgetter
from typing import NamedTuple

SECONDS_PER_DAY = 86_400
HOURS_PER_DAY = 24
DAYS_PER_YEAR = 365
# Both specs count memory in decimal units: 8,000 tokens x 327,680 B is their "2.62 GB".
GB = 1e9
TB = 1e12

# --- Per-token GPU cost of the 70B and 8B models (spec 000, "The numbers that decide it") ---
# "Writing a 400-token answer takes about 0.53 GPU-seconds."
LARGE_DECODE_GPU_S_PER_TOKEN = 0.53 / 400
# "Reading all 3,000 tokens again would take 1.05 GPU-seconds." The cached case (390 tokens in
# 0.14 GPU-seconds) gives 0.00036 a token, the same figure within the spec's rounding.
LARGE_PREFILL_GPU_S_PER_TOKEN = 1.05 / 3000
# The 8B is only given per message: about 0.18 GPU-seconds where the 70B needs 0.67 for the same
# message. Both of its per-token costs are the 70B's scaled by that ratio.
SMALL_TO_LARGE_COST = 0.18 / 0.67
SMALL_DECODE_GPU_S_PER_TOKEN = LARGE_DECODE_GPU_S_PER_TOKEN * SMALL_TO_LARGE_COST
SMALL_PREFILL_GPU_S_PER_TOKEN = LARGE_PREFILL_GPU_S_PER_TOKEN * SMALL_TO_LARGE_COST


class PlanInputError(ValueError):
    """An input the planner cannot size from; `run_plan` turns it into exit code 2."""


# ------------------------------------------------------------------------------------------
# Inputs


def _check_finite_and_sign(
    inputs: MessageInputs | SessionInputs, shares: set[str], may_be_zero: set[str]
) -> None:
    for item in fields(inputs):
        value = getattr(inputs, item.name)
        flag = "--" + item.name.replace("_", "-")
        if not math.isfinite(value):
            raise PlanInputError(f"{flag} must be a finite number, not {value}")
        if item.name in shares and not 0 <= value <= 1:
            raise PlanInputError(f"{flag} is a share and must lie in 0..1, not {value}")
        if item.name in may_be_zero and value < 0:
            raise PlanInputError(f"{flag} must not be negative, not {value}")
        if item.name not in shares | may_be_zero and value <= 0:
            raise PlanInputError(f"{flag} must be greater than 0, not {value}")


@dataclass(frozen=True, slots=True)
class MessageInputs:
    """Spec 000: fleet from messages a day and the GPU-seconds each message costs."""

    daily_users: float = 10_000_000
    messages_per_user: float = 10
    peak_factor: float = 3.0
    prompt_tokens: float = 3000
    # The spec's 390 uncached tokens are the new message plus the 10 % of history the cache
    # missed: n + 0.1 x (3,000 - n) = 390 gives a 100-token new message.
    new_message_tokens: float = 100
    answer_tokens: float = 400
    cached_history_share: float = 0.9
    small_model_share: float = 0.7
    decode_tokens_per_s: float = 30
    spare_share: float = 0.3
    replica_gpus: int = 4
    small_replica_gpus: int = 1
    gpu_dollars_per_hour: float = 3.0
    # The spec adds "the team" to the GPU bill without a figure. Its two published costs,
    # $1.10 per 1,000 on 1,500 GPUs and $2.20 on 3,000 GPUs (each at $3 x 24 h over 100 M
    # messages a day), leave $2,000 and $4,000 a day beyond the GPUs; this is their midpoint.
    team_dollars_per_day: float = 3000
    api_input_dollars_per_m: float = 3.0
    api_cached_dollars_per_m: float = 0.30
    api_output_dollars_per_m: float = 15.0
    large_prefill_gpu_s_per_token: float = LARGE_PREFILL_GPU_S_PER_TOKEN
    large_decode_gpu_s_per_token: float = LARGE_DECODE_GPU_S_PER_TOKEN
    small_prefill_gpu_s_per_token: float = SMALL_PREFILL_GPU_S_PER_TOKEN
    small_decode_gpu_s_per_token: float = SMALL_DECODE_GPU_S_PER_TOKEN
    # The same 70B as spec 002 (80 layers, 8 KV heads of 128, fp16): spec 000's 320 KB a token.
    layers: int = 80
    kv_heads: int = 8
    head_dim: int = 128
    kv_bytes_per_element: float = 2
    think_time_s: float = 60
    stored_bytes_per_message: float = 2500
    # A message stores the question and the answer: 3,500 messages/s are "7,000 writes".
    writes_per_message: float = 2

    def __post_init__(self) -> None:
        _check_finite_and_sign(
            self,
            shares={"cached_history_share", "small_model_share", "spare_share"},
            may_be_zero={
                "new_message_tokens",
                "team_dollars_per_day",
                "api_input_dollars_per_m",
                "api_cached_dollars_per_m",
                "gpu_dollars_per_hour",
                "think_time_s",
                "stored_bytes_per_message",
                "writes_per_message",
            },
        )
        if self.new_message_tokens > self.prompt_tokens:
            raise PlanInputError("--new-message-tokens cannot exceed --prompt-tokens")


@dataclass(frozen=True, slots=True)
class SessionInputs:
    """Spec 002: fleet from the KV-cache bytes each resident conversation holds."""

    layers: int = 80
    kv_heads: int = 8
    # MHA gives every query head its own KV head; the lever table prices that against GQA.
    query_heads: int = 64
    head_dim: int = 128
    kv_bytes_per_element: float = 2
    replica_gpus: int = 4
    gpu_memory_gb: float = 80
    weights_gb: float = 140
    activations_gb_per_gpu: float = 5
    prefix_tokens: float = 2400
    conversation_tokens: float = 5600
    turns_per_session: float = 12
    answer_tokens: float = 600
    decode_tokens_per_s: float = 40
    think_time_s: float = 25
    ttl_s: float = 20
    daily_users: float = 10_000_000
    sessions_per_user: float = 3
    peak_factor: float = 2.2
    gpu_dollars_per_hour: float = 2.5
    hbm_tb_per_s: float = 3.3
    compaction_saved_tokens: float = 1000
    small_layers: int = 32
    small_kv_heads: int = 8
    small_weights_gb: float = 16
    # The spec gives the 8B "a 60 GB KV budget on one GPU": 80 - 16 GB of weights - this.
    small_activations_gb: float = 4
    small_session_share: float = 0.6

    def __post_init__(self) -> None:
        _check_finite_and_sign(
            self,
            shares={"small_session_share"},
            may_be_zero={
                "prefix_tokens",
                "ttl_s",
                "gpu_dollars_per_hour",
                "compaction_saved_tokens",
                "activations_gb_per_gpu",
                "small_activations_gb",
            },
        )
        self._check_memory()
        if self.compaction_saved_tokens >= self.conversation_tokens:
            raise PlanInputError("--compaction-saved-tokens must be below --conversation-tokens")

    def _check_memory(self) -> None:
        node_gb = self.replica_gpus * self.gpu_memory_gb
        if self.weights_gb >= node_gb:
            raise PlanInputError(
                f"weights of {self.weights_gb:g} GB do not fit in {self.replica_gpus} x "
                f"{self.gpu_memory_gb:g} GB of GPU memory"
            )
        if self.weights_gb + self.replica_gpus * self.activations_gb_per_gpu >= node_gb:
            raise PlanInputError("weights and activations leave no GPU memory for the KV cache")
        if self.small_weights_gb + self.small_activations_gb >= self.gpu_memory_gb:
            raise PlanInputError("the small model's weights do not fit in one GPU's memory")


def kv_bytes_per_token(layers: float, kv_heads: float, head_dim: float, bytes_: float) -> float:
    """One key and one value vector, per KV head, per layer, for every token in the cache."""
    return 2 * layers * kv_heads * head_dim * bytes_


# ------------------------------------------------------------------------------------------
# Spec 000: from messages


@dataclass(frozen=True, slots=True)
class Traffic:
    messages_per_day: float
    messages_per_s_avg: float
    messages_per_s_peak: float
    stream_s: float
    open_streams_peak: float


@dataclass(frozen=True, slots=True)
class GpuTime:
    history_tokens: float
    uncached_prompt_tokens: float
    cached_prompt_tokens: float
    large_prefill_gpu_s: float
    large_decode_gpu_s: float
    large_gpu_s: float
    large_prefill_gpu_s_no_cache: float
    small_gpu_s: float
    prefill_gpus_peak: float
    prefill_gpus_peak_no_cache: float


@dataclass(frozen=True, slots=True)
class MessageFleet:
    busy_gpus_large_only: float
    fleet_large_only: float
    busy_gpus_routed: float
    fleet_routed_large: float
    fleet_routed_small: float
    fleet_routed: float


@dataclass(frozen=True, slots=True)
class MessageCost:
    dollars_per_day_large_only: float
    dollars_per_day_routed: float
    per_1000_large_only: float
    per_1000_routed: float
    api_per_1000: float
    self_hosted_share_of_api: float


@dataclass(frozen=True, slots=True)
class ConversationMemory:
    kv_bytes_per_token: float
    kv_gb_per_conversation: float
    waiting_conversations_peak: float
    kv_tb_between_turns: float
    writes_per_s_peak: float
    storage_tb_per_year: float


@dataclass(frozen=True, slots=True)
class MessagePlan:
    traffic: Traffic
    gpu_time: GpuTime
    fleet: MessageFleet
    cost: MessageCost
    memory: ConversationMemory


def _traffic(i: MessageInputs) -> Traffic:
    per_day = i.daily_users * i.messages_per_user
    average = per_day / SECONDS_PER_DAY
    peak = average * i.peak_factor
    stream_s = i.answer_tokens / i.decode_tokens_per_s
    # Little's law: streams open = arrivals per second x seconds each one streams.
    return Traffic(per_day, average, peak, stream_s, peak * stream_s)


def _gpu_time(i: MessageInputs, peak: float) -> GpuTime:
    history = i.prompt_tokens - i.new_message_tokens
    # The new message is never cached; of the history, only the cache misses are prefilled.
    uncached = i.new_message_tokens + (1 - i.cached_history_share) * history
    large_prefill = uncached * i.large_prefill_gpu_s_per_token
    large_decode = i.answer_tokens * i.large_decode_gpu_s_per_token
    no_cache = i.prompt_tokens * i.large_prefill_gpu_s_per_token
    small = uncached * i.small_prefill_gpu_s_per_token
    small += i.answer_tokens * i.small_decode_gpu_s_per_token
    return GpuTime(
        history_tokens=history,
        uncached_prompt_tokens=uncached,
        cached_prompt_tokens=i.prompt_tokens - uncached,
        large_prefill_gpu_s=large_prefill,
        large_decode_gpu_s=large_decode,
        large_gpu_s=large_prefill + large_decode,
        large_prefill_gpu_s_no_cache=no_cache,
        small_gpu_s=small,
        prefill_gpus_peak=peak * large_prefill,
        prefill_gpus_peak_no_cache=peak * no_cache,
    )


def whole_replicas(busy_gpus: float, spare_share: float, replica_gpus: int) -> float:
    """GPUs to buy: busy GPUs plus the spare share, rounded up to whole replicas."""
    # round() first so 3,008.0000001 GPUs of float noise does not buy one more replica.
    replicas = math.ceil(round(busy_gpus * (1 + spare_share) / replica_gpus, 6))
    return float(replicas * replica_gpus)


def _fleet(i: MessageInputs, peak: float, gpu: GpuTime) -> MessageFleet:
    busy_large_only = peak * gpu.large_gpu_s
    busy_large = peak * (1 - i.small_model_share) * gpu.large_gpu_s
    busy_small = peak * i.small_model_share * gpu.small_gpu_s
    routed_large = whole_replicas(busy_large, i.spare_share, i.replica_gpus)
    routed_small = whole_replicas(busy_small, i.spare_share, i.small_replica_gpus)
    return MessageFleet(
        busy_gpus_large_only=busy_large_only,
        fleet_large_only=whole_replicas(busy_large_only, i.spare_share, i.replica_gpus),
        busy_gpus_routed=busy_large + busy_small,
        fleet_routed_large=routed_large,
        fleet_routed_small=routed_small,
        fleet_routed=routed_large + routed_small,
    )


def _cost(i: MessageInputs, traffic: Traffic, gpu: GpuTime, fleet: MessageFleet) -> MessageCost:
    def dollars_per_day(gpus: float) -> float:
        return gpus * i.gpu_dollars_per_hour * HOURS_PER_DAY + i.team_dollars_per_day

    thousands_per_day = traffic.messages_per_day / 1000
    api_per_message = (
        gpu.uncached_prompt_tokens * i.api_input_dollars_per_m
        + gpu.cached_prompt_tokens * i.api_cached_dollars_per_m
        + i.answer_tokens * i.api_output_dollars_per_m
    ) / 1e6
    large_only = dollars_per_day(fleet.fleet_large_only)
    routed = dollars_per_day(fleet.fleet_routed)
    api_per_1000 = api_per_message * 1000
    per_1000_large_only = large_only / thousands_per_day
    return MessageCost(
        dollars_per_day_large_only=large_only,
        dollars_per_day_routed=routed,
        per_1000_large_only=per_1000_large_only,
        per_1000_routed=routed / thousands_per_day,
        api_per_1000=api_per_1000,
        # The answer tokens are billed, so the API bill is never zero.
        self_hosted_share_of_api=per_1000_large_only / api_per_1000,
    )


def _conversation_memory(i: MessageInputs, traffic: Traffic) -> ConversationMemory:
    per_token = kv_bytes_per_token(i.layers, i.kv_heads, i.head_dim, i.kv_bytes_per_element)
    per_conversation = (i.prompt_tokens + i.answer_tokens) * per_token
    # Little's law again: conversations idle between turns = arrivals x think time.
    waiting = traffic.messages_per_s_peak * i.think_time_s
    return ConversationMemory(
        kv_bytes_per_token=per_token,
        kv_gb_per_conversation=per_conversation / GB,
        waiting_conversations_peak=waiting,
        kv_tb_between_turns=waiting * per_conversation / TB,
        writes_per_s_peak=traffic.messages_per_s_peak * i.writes_per_message,
        storage_tb_per_year=traffic.messages_per_day
        * i.stored_bytes_per_message
        * DAYS_PER_YEAR
        / TB,
    )


def plan_messages(i: MessageInputs) -> MessagePlan:
    """Spec 000's sizing: messages/s -> GPU-seconds per message -> busy GPUs -> fleet -> $."""
    traffic = _traffic(i)
    gpu = _gpu_time(i, traffic.messages_per_s_peak)
    fleet = _fleet(i, traffic.messages_per_s_peak, gpu)
    return MessagePlan(
        traffic=traffic,
        gpu_time=gpu,
        fleet=fleet,
        cost=_cost(i, traffic, gpu, fleet),
        memory=_conversation_memory(i, traffic),
    )


# ------------------------------------------------------------------------------------------
# Spec 002: from KV-cache bytes


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
    """Spec 002's steps 1-7: KV bytes -> sessions per node -> Little's law -> GPUs -> $."""
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
    """Spec 002's lever table: the same sizing with one input changed per row."""
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
    """Spec 002's sizing, the 8B's per-GPU capacity, and the lever table."""
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


# ------------------------------------------------------------------------------------------
# Steps: each result with the formula that produced it, numbers filled in


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    formula: str
    value: float
    unit: str


class StepSpec(NamedTuple):
    name: str
    # Where the result lives in the plan, e.g. "traffic.messages_per_s_peak".
    result: str
    unit: str
    # str.format template over i (the inputs) and the plan's parts, numbers shown by _n.
    formula: str


def _n(value: float) -> str:
    """A number as a person reads it: thousands separators, about three significant digits."""
    magnitude = abs(value)
    if magnitude >= 1e9:
        return f"{value / 1e9:,.2f}".removesuffix(".00") + " B"
    if magnitude >= 1e7:
        return f"{value / 1e6:,.1f}".removesuffix(".0") + " M"
    if magnitude >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def _with_unit(value: float, unit: str) -> str:
    if unit.startswith("$"):
        sign = "-" if value < 0 else ""
        return f"{sign}${_n(abs(value))}{unit[1:]}"
    return f"{_n(value)} {unit}".rstrip()


class _Shown:
    """Attribute access that yields numbers formatted for reading, for the formula templates."""

    def __init__(self, source: object) -> None:
        self._source = source

    def __getattr__(self, name: str) -> str:
        return _n(getattr(self._source, name))


def _step_specs(*rows: str) -> tuple[StepSpec, ...]:
    """Steps written one a row: "name | result | unit | formula"."""
    return tuple(StepSpec(*row.split(" | ", 3)) for row in rows)


def explain(
    specs: tuple[StepSpec, ...],
    i: MessageInputs | SessionInputs,
    plan: MessagePlan | SessionPlan,
) -> list[Step]:
    """Each step's result, with its formula filled in from the inputs and the plan's parts."""
    parts = {item.name: _Shown(getattr(plan, item.name)) for item in fields(plan)}
    return [
        Step(
            spec.name,
            spec.formula.format(i=_Shown(i), **parts),
            attrgetter(spec.result)(plan),
            spec.unit,
        )
        for spec in specs
    ]


MESSAGE_STEPS = _step_specs(
    "messages/s, average | traffic.messages_per_s_avg | msg/s | "
    "{i.daily_users} users x {i.messages_per_user} msg / 86,400 s",
    "messages/s, peak | traffic.messages_per_s_peak | msg/s | "
    "{traffic.messages_per_s_avg} x peak factor {i.peak_factor}",
    "seconds one answer streams | traffic.stream_s | s | "
    "{i.answer_tokens} tokens / {i.decode_tokens_per_s} tokens/s",
    "streams open at the peak | traffic.open_streams_peak | streams | "
    "{traffic.messages_per_s_peak} msg/s x {traffic.stream_s} s (Little's law)",
    "history tokens in the prompt | gpu_time.history_tokens | tokens | "
    "{i.prompt_tokens} prompt - {i.new_message_tokens} new message",
    "uncached prompt tokens | gpu_time.uncached_prompt_tokens | tokens | "
    "{i.new_message_tokens} + (1 - {i.cached_history_share}) x {gpu_time.history_tokens}",
    "70B prefill per message | gpu_time.large_prefill_gpu_s | GPU-s | "
    "{gpu_time.uncached_prompt_tokens} tokens x {i.large_prefill_gpu_s_per_token}",
    "70B decode per message | gpu_time.large_decode_gpu_s | GPU-s | "
    "{i.answer_tokens} tokens x {i.large_decode_gpu_s_per_token}",
    "70B per message | gpu_time.large_gpu_s | GPU-s | "
    "{gpu_time.large_prefill_gpu_s} + {gpu_time.large_decode_gpu_s}",
    "70B prefill without the cache | gpu_time.large_prefill_gpu_s_no_cache | GPU-s | "
    "{i.prompt_tokens} tokens x {i.large_prefill_gpu_s_per_token}",
    "8B per message | gpu_time.small_gpu_s | GPU-s | "
    "{gpu_time.uncached_prompt_tokens} x {i.small_prefill_gpu_s_per_token} + "
    "{i.answer_tokens} x {i.small_decode_gpu_s_per_token}",
    "GPUs prefilling at the peak | gpu_time.prefill_gpus_peak | GPUs | "
    "{traffic.messages_per_s_peak} msg/s x {gpu_time.large_prefill_gpu_s} GPU-s",
    "... without the cache | gpu_time.prefill_gpus_peak_no_cache | GPUs | "
    "{traffic.messages_per_s_peak} msg/s x {gpu_time.large_prefill_gpu_s_no_cache} GPU-s",
    "busy GPUs, 70B only | fleet.busy_gpus_large_only | GPUs | "
    "{traffic.messages_per_s_peak} msg/s x {gpu_time.large_gpu_s} GPU-s",
    "fleet, 70B only | fleet.fleet_large_only | GPUs | "
    "{fleet.busy_gpus_large_only} x (1 + {i.spare_share} spare) in whole {i.replica_gpus}-GPU "
    "replicas",
    "busy GPUs, routed | fleet.busy_gpus_routed | GPUs | "
    "{traffic.messages_per_s_peak} x ((1 - {i.small_model_share}) x {gpu_time.large_gpu_s} + "
    "{i.small_model_share} x {gpu_time.small_gpu_s})",
    "fleet, routed | fleet.fleet_routed | GPUs | "
    "{fleet.fleet_routed_large} on 70B + {fleet.fleet_routed_small} on 8B, each busy x (1 + "
    "{i.spare_share}) in whole replicas",
    "per 1,000 messages, 70B only | cost.per_1000_large_only | $ | "
    "({fleet.fleet_large_only} GPUs x ${i.gpu_dollars_per_hour} x 24 h + "
    "${i.team_dollars_per_day} team) / {traffic.messages_per_day} x 1,000",
    "per 1,000 messages, routed | cost.per_1000_routed | $ | "
    "({fleet.fleet_routed} GPUs x ${i.gpu_dollars_per_hour} x 24 h + "
    "${i.team_dollars_per_day} team) / {traffic.messages_per_day} x 1,000",
    "per 1,000 messages, hosted API | cost.api_per_1000 | $ | "
    "({gpu_time.uncached_prompt_tokens} x ${i.api_input_dollars_per_m} + "
    "{gpu_time.cached_prompt_tokens} x ${i.api_cached_dollars_per_m} + {i.answer_tokens} x "
    "${i.api_output_dollars_per_m}) / 1,000",
    "self-hosted share of the API bill | cost.self_hosted_share_of_api |  | "
    "{cost.per_1000_large_only} / {cost.api_per_1000}",
    "KV bytes per token | memory.kv_bytes_per_token | B | "
    "2 x {i.layers} layers x {i.kv_heads} KV heads x {i.head_dim} x {i.kv_bytes_per_element} "
    "B",
    "KV per conversation | memory.kv_gb_per_conversation | GB | "
    "({i.prompt_tokens} + {i.answer_tokens}) tokens x {memory.kv_bytes_per_token} B",
    "conversations between turns, peak | memory.waiting_conversations_peak |  | "
    "{traffic.messages_per_s_peak} msg/s x {i.think_time_s} s think time",
    "their KV cache | memory.kv_tb_between_turns | TB | "
    "{memory.waiting_conversations_peak} x {memory.kv_gb_per_conversation} GB",
    "conversation writes, peak | memory.writes_per_s_peak | writes/s | "
    "{traffic.messages_per_s_peak} msg/s x {i.writes_per_message}",
    "conversation storage a year | memory.storage_tb_per_year | TB | "
    "{traffic.messages_per_day} msg/day x {i.stored_bytes_per_message} B x 365",
)

SESSION_STEPS = _step_specs(
    "KV bytes per token | memory.kv_bytes_per_token | B | "
    "2 x {i.layers} layers x {i.kv_heads} KV heads x {i.head_dim} x {i.kv_bytes_per_element} "
    "B",
    "KV budget per node | memory.kv_budget_gb | GB | "
    "{i.replica_gpus} x ({i.gpu_memory_gb} - {i.activations_gb_per_gpu} activations) - "
    "{i.weights_gb} weights",
    "KV per session | memory.session_gb | GB | "
    "({i.prefix_tokens} prefix + {i.conversation_tokens} conversation) tokens x "
    "{memory.kv_bytes_per_token} B",
    "sessions per node, naive | memory.sessions_naive |  | "
    "{memory.kv_budget_gb} GB / {memory.session_gb} GB",
    "shared prefix, once per node | memory.prefix_gb | GB | "
    "{i.prefix_tokens} tokens x {memory.kv_bytes_per_token} B",
    "conversation KV per session | memory.conversation_gb | GB | "
    "{i.conversation_tokens} tokens x {memory.kv_bytes_per_token} B",
    "sessions per node, prefix shared | memory.sessions_shared |  | "
    "({memory.kv_budget_gb} - {memory.prefix_gb}) GB / {memory.conversation_gb} GB",
    "generation per turn | slots.generation_s | s | "
    "{i.answer_tokens} tokens / {i.decode_tokens_per_s} tokens/s",
    "turns finding a warm cache | slots.warm_hit_rate |  | "
    "1 - e^(-{i.ttl_s} s TTL / {i.think_time_s} s think time)",
    "slot waiting per turn | slots.wait_s | s | "
    "{i.think_time_s} s x {slots.warm_hit_rate}: the mean of min(gap, TTL)",
    "slot held per turn | slots.slot_s_per_turn | s | {slots.generation_s} s + {slots.wait_s} s",
    "session wall clock | slots.session_s | s | "
    "{i.turns_per_session} turns x ({slots.generation_s} + {i.think_time_s}) s",
    "slot-seconds per session | slots.slot_s_per_session | s | "
    "{i.turns_per_session} turns x {slots.slot_s_per_turn} s",
    "TTL duty cycle | slots.duty_cycle | x | {slots.session_s} s / {slots.slot_s_per_session} s",
    "sessions per node, with TTL | fleet.sessions_per_node |  | "
    "{memory.sessions_shared} x {slots.duty_cycle}",
    "sessions a day | fleet.sessions_per_day |  | {i.daily_users} users x {i.sessions_per_user}",
    "arrival rate | fleet.arrivals_per_s | sessions/s | {fleet.sessions_per_day} / 86,400 s",
    "concurrent sessions, average | fleet.concurrent_avg |  | "
    "{fleet.arrivals_per_s}/s x {slots.session_s} s (Little's law)",
    "concurrent sessions, peak | fleet.concurrent_peak |  | "
    "{fleet.concurrent_avg} x peak factor {i.peak_factor}",
    "nodes | fleet.nodes |  | {fleet.concurrent_peak} / {fleet.sessions_per_node} per node",
    "GPUs | fleet.gpus |  | {fleet.nodes} nodes x {i.replica_gpus}",
    "dollars a day | fleet.dollars_per_day | $ | "
    "{fleet.gpus} GPUs x 24 h x ${i.gpu_dollars_per_hour}",
    "dollars a year | fleet.dollars_per_year | $ | ${fleet.dollars_per_day} x 365",
    "dollars per turn | fleet.dollars_per_turn | $ | "
    "${fleet.dollars_per_day} / {fleet.turns_per_day} turns a day",
    "dollars per user a month | fleet.dollars_per_user_month | $ | "
    "${fleet.dollars_per_day} x 30 / {i.daily_users} users",
    "sessions decoding at once | decode.decoding_per_node | per node | "
    "{fleet.sessions_per_node} x {slots.generation_s} s / {slots.slot_s_per_turn} s",
    "read per GPU per decode step | decode.gb_read_per_gpu_step | GB | "
    "({i.weights_gb} + {decode.decoding_per_node} x {memory.session_gb}) GB / "
    "{i.replica_gpus}",
    "decode step | decode.step_ms | ms | {decode.gb_read_per_gpu_step} GB / {i.hbm_tb_per_s} TB/s",
    "tokens/s per answer | decode.tokens_per_s | tokens/s | "
    "1 / {decode.step_ms} ms, target {i.decode_tokens_per_s}",
    "bandwidth ceiling per node | decode.bandwidth_ceiling_per_node | sessions | "
    "({i.hbm_tb_per_s} TB/s / {i.decode_tokens_per_s} x {i.replica_gpus} - {i.weights_gb}) GB "
    "/ {memory.session_gb} GB x {slots.slot_s_per_turn} / {slots.generation_s}",
    "8B KV bytes per token | small_model.kv_bytes_per_token | B | "
    "2 x {i.small_layers} layers x {i.small_kv_heads} KV heads x {i.head_dim} x "
    "{i.kv_bytes_per_element} B",
    "8B KV budget on one GPU | small_model.kv_budget_gb | GB | "
    "{i.gpu_memory_gb} - {i.small_weights_gb} weights - {i.small_activations_gb} activations",
    "8B concurrent per GPU | small_model.concurrent_per_gpu |  | "
    "steps 3-5 again on the 8B's one-GPU node",
    "8B over 70B per GPU | small_model.per_gpu_ratio | x | "
    "{small_model.concurrent_per_gpu} / {small_model.large_concurrent_per_gpu}",
)


# ------------------------------------------------------------------------------------------
# Command line

PRESETS: dict[str, type[MessageInputs] | type[SessionInputs]] = {
    "000": MessageInputs,
    "002": SessionInputs,
}

FLAG_HELP = {
    "daily_users": "daily active users",
    "messages_per_user": "messages per user per day",
    "peak_factor": "busiest hour over the daily average",
    "prompt_tokens": "prompt tokens per message (system prompt, history, new message)",
    "new_message_tokens": "tokens of the new message, never in the cache",
    "answer_tokens": "answer tokens per message (002: per turn)",
    "cached_history_share": "share of the history found in the prefix cache, 0..1",
    "small_model_share": "share of messages routed to the 8B model, 0..1",
    "decode_tokens_per_s": "tokens/s one answer streams at (002: the decode target)",
    "spare_share": "spare GPUs for failures and spikes, as a share of busy GPUs, 0..1",
    "replica_gpus": "GPUs per 70B replica (node)",
    "small_replica_gpus": "GPUs per 8B replica",
    "gpu_dollars_per_hour": "dollars per GPU-hour",
    "team_dollars_per_day": "people cost added to the GPU bill, dollars a day",
    "api_input_dollars_per_m": "hosted API, dollars per million uncached input tokens",
    "api_cached_dollars_per_m": "hosted API, dollars per million cached input tokens",
    "api_output_dollars_per_m": "hosted API, dollars per million output tokens",
    "large_prefill_gpu_s_per_token": "70B GPU-seconds per prefilled token (1.05 s / 3,000)",
    "large_decode_gpu_s_per_token": "70B GPU-seconds per decoded token (0.53 s / 400)",
    "small_prefill_gpu_s_per_token": "8B GPU-seconds per prefilled token (70B x 0.18 / 0.67)",
    "small_decode_gpu_s_per_token": "8B GPU-seconds per decoded token (70B x 0.18 / 0.67)",
    "layers": "transformer layers of the 70B",
    "kv_heads": "KV heads of the 70B (8 with GQA)",
    "query_heads": "query heads of the 70B: the KV heads it would have under MHA",
    "head_dim": "dimension of one attention head",
    "kv_bytes_per_element": "bytes per cached number (2 fp16, 1 fp8)",
    "think_time_s": "mean seconds a user reads and types between turns",
    "stored_bytes_per_message": "bytes stored per message with its metadata",
    "writes_per_message": "store writes per message (question and answer)",
    "gpu_memory_gb": "memory of one GPU, GB",
    "weights_gb": "70B weights per node, GB",
    "activations_gb_per_gpu": "activations and workspace per GPU, GB",
    "prefix_tokens": "stable prefix tokens shared by all sessions (system prompt, tools)",
    "conversation_tokens": "average conversation tokens per session beyond the prefix",
    "turns_per_session": "turns per session",
    "ttl_s": "seconds an idle session keeps its KV cache",
    "sessions_per_user": "sessions per user per day",
    "hbm_tb_per_s": "memory bandwidth of one GPU, TB/s",
    "compaction_saved_tokens": "conversation tokens compaction removes (lever table)",
    "small_layers": "transformer layers of the 8B",
    "small_kv_heads": "KV heads of the 8B",
    "small_weights_gb": "8B weights on its one GPU, GB",
    "small_activations_gb": "8B activations and workspace, GB",
    "small_session_share": "share of sessions routed to the 8B (lever table), 0..1",
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _default_text(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:.4g}"


def _presets_with(name: str) -> list[str]:
    return [preset for preset, inputs in PRESETS.items() if name in _field_names(inputs)]


def _field_names(inputs: type[MessageInputs] | type[SessionInputs]) -> set[str]:
    return {item.name for item in fields(inputs)}


def _field(preset: str, name: str) -> Field:
    return next(item for item in fields(PRESETS[preset]) if item.name == name)


def _field_default(preset: str, name: str) -> float:
    return _field(preset, name).default


def _is_integer(name: str) -> bool:
    # Annotations are strings here (postponed evaluation): layers and heads are counts.
    return _field(_presets_with(name)[0], name).type == "int"


def _spec_defaults(name: str) -> str:
    return "; ".join(
        f"{preset}: {_default_text(_field_default(preset, name))}" for preset in _presets_with(name)
    )


def add_plan_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `plan`; every input is a flag whose default is the chosen spec's value."""
    parser = subparsers.add_parser(
        "plan",
        help="size a GPU fleet from tokens, step by step",
        description="Size a GPU fleet from tokens. --preset 000 sizes from messages and "
        "GPU-seconds, --preset 002 from KV-cache bytes. Unset flags take the preset's value.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="000", help="which spec")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    shared = parser.add_argument_group("inputs of both presets")
    groups = {
        preset: parser.add_argument_group(f"inputs of --preset {preset} only") for preset in PRESETS
    }
    for name, text in FLAG_HELP.items():
        presets = _presets_with(name)
        group = shared if len(presets) > 1 else groups[presets[0]]
        group.add_argument(
            _flag(name),
            dest=name,
            type=int if _is_integer(name) else float,
            default=None,
            metavar="N",
            help=f"{text} (spec default {_spec_defaults(name)})",
        )
    return parser


def inputs_from_args(args: argparse.Namespace) -> MessageInputs | SessionInputs:
    inputs = PRESETS[args.preset]
    known = _field_names(inputs)
    overrides = {}
    for name in FLAG_HELP:
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in known:
            raise PlanInputError(f"{_flag(name)} does not apply to --preset {args.preset}")
        overrides[name] = value
    return inputs(**overrides)


def _table(title: str, steps: list[Step]) -> list[str]:
    results = [_with_unit(step.value, step.unit) for step in steps]
    name_width = max(len(step.name) for step in steps)
    result_width = max(len(result) for result in results)
    lines = [title, ""]
    for step, result in zip(steps, results, strict=True):
        lines.append(f"{step.name:<{name_width}}  {result:>{result_width}}   = {step.formula}")
    return lines


def _lever_lines(levers: tuple[LeverRow, ...]) -> list[str]:
    lines = ["", "lever table (the same steps, one input changed)", ""]
    width = max(len(row.lever) for row in levers)
    change_width = max(len(row.change) for row in levers)
    lines.append(
        f"{'lever':<{width}}  {'change':<{change_width}}  {'per GPU':>7}  {'GPUs':>8}"
        f"  {'$/year':>9}  {'saving/year':>11}"
    )
    for row in levers:
        lines.append(
            f"{row.lever:<{width}}  {row.change:<{change_width}}  {_n(row.concurrent_per_gpu):>7}"
            f"  {_n(row.gpus):>8}  {_with_unit(row.dollars_per_year, '$'):>9}"
            f"  {_with_unit(row.saving_per_year, '$'):>11}"
        )
    return lines


def render(inputs: MessageInputs | SessionInputs) -> tuple[str, dict[str, object]]:
    """The readable table and the JSON object for one set of inputs."""
    if isinstance(inputs, MessageInputs):
        plan: MessagePlan | SessionPlan = plan_messages(inputs)
        steps = explain(MESSAGE_STEPS, inputs, plan)
        lines = _table("spec 000: fleet from messages and GPU-seconds", steps)
    else:
        plan = plan_sessions(inputs)
        steps = explain(SESSION_STEPS, inputs, plan)
        lines = _table("spec 002: fleet from KV-cache bytes", steps)
        lines += _lever_lines(plan.levers)
    document = {
        "preset": "000" if isinstance(inputs, MessageInputs) else "002",
        "inputs": asdict(inputs),
        "results": asdict(plan),
        "steps": [asdict(step) for step in steps],
    }
    return "\n".join(lines), document


def run_plan(args: argparse.Namespace) -> int:
    """Print the plan for parsed `plan` arguments; 2 with a message on stderr for bad input."""
    try:
        text, document = render(inputs_from_args(args))
    except PlanInputError as error:
        print(f"chatctl plan: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(document) if args.json else text)
    return 0
