"""Sizing 000: the fleet from messages a day and the GPU-seconds each message costs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from domain.capacity.inputs import (
    DAYS_PER_YEAR,
    GB,
    HOURS_PER_DAY,
    SECONDS_PER_DAY,
    TB,
    MessageInputs,
    kv_bytes_per_token,
)
from domain.capacity.regions import RegionPlan, plan_regions


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
    regions: RegionPlan


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
    """Sizing 000's sizing: messages/s -> GPU-seconds per message -> busy GPUs -> fleet -> $."""
    traffic = _traffic(i)
    gpu = _gpu_time(i, traffic.messages_per_s_peak)
    fleet = _fleet(i, traffic.messages_per_s_peak, gpu)
    return MessagePlan(
        traffic=traffic,
        gpu_time=gpu,
        fleet=fleet,
        cost=_cost(i, traffic, gpu, fleet),
        memory=_conversation_memory(i, traffic),
        regions=plan_regions(i, fleet.fleet_routed, fleet.busy_gpus_routed),
    )
