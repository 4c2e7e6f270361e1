"""Steps: each result with the formula that produced it, numbers filled in, for both sizings."""

from __future__ import annotations

from dataclasses import dataclass, fields
from operator import attrgetter
from typing import NamedTuple

from domain.capacity.inputs import MessageInputs, SessionInputs
from domain.capacity.messages import MessagePlan
from domain.capacity.sessions import SessionPlan


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
    # str.format template over i (the inputs) and the plan's parts, numbers shown by number().
    formula: str


def number(value: float) -> str:
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


def with_unit(value: float, unit: str) -> str:
    if unit.startswith("$"):
        sign = "-" if value < 0 else ""
        return f"{sign}${number(abs(value))}{unit[1:]}"
    return f"{number(value)} {unit}".rstrip()


class _Shown:
    """Attribute access that yields numbers formatted for reading, for the formula templates."""

    def __init__(self, source: object) -> None:
        self._source = source

    def __getattr__(self, name: str) -> str:
        return number(getattr(self._source, name))


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
    "regions | regions.regions |  | "
    "{fleet.fleet_routed} GPUs / {i.region_gpu_cap} GPUs a region, rounded up",
    "GPUs per region | regions.gpus_per_region | GPUs | "
    "{fleet.fleet_routed} GPUs / {regions.regions} regions",
    "busy share at the peak | regions.busy_share |  | "
    "{fleet.busy_gpus_routed} busy GPUs / {fleet.fleet_routed} GPUs",
    "busy share with one region lost | regions.busy_share_one_lost |  | "
    "{regions.busy_share} x n / (n - 1), n = {regions.regions} regions (2 at least)",
    "regions to lose one | regions.regions_to_lose_one |  | "
    "1 / (1 - {regions.busy_share}), rounded up: n - 1 of them carry the peak",
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
