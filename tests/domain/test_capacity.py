"""The capacity planner: each figure the two sizings publish, within 3 %, and its arithmetic."""

from __future__ import annotations

from dataclasses import replace
from operator import attrgetter

import pytest

from domain.capacity import (
    MessageInputs,
    PlanInputError,
    SessionInputs,
    kv_bytes_per_token,
    plan_messages,
    plan_sessions,
    whole_replicas,
)

# The sizings round their figures; this is how far from a published figure a result may lie.
TOLERANCE = 0.03

MESSAGES = plan_messages(MessageInputs())
SESSIONS = plan_sessions(SessionInputs())
LEVERS = {row.lever: row for row in SESSIONS.levers}


def within(published: float) -> object:
    return pytest.approx(published, rel=TOLERANCE)


# (what sizing 000 says, where the planner keeps it, the published figure)
SPEC_000_FIGURES = [
    ("1,160 messages a second on average", "traffic.messages_per_s_avg", 1160),
    ("3,500 messages a second at the peak", "traffic.messages_per_s_peak", 3500),
    ("an answer streams about 13 seconds", "traffic.stream_s", 13),
    ("about 46,000 streams open at the peak", "traffic.open_streams_peak", 46_000),
    ("390 new tokens to prefill per message", "gpu_time.uncached_prompt_tokens", 390),
    ("0.14 GPU-s to read the prompt", "gpu_time.large_prefill_gpu_s", 0.14),
    ("0.53 GPU-s to write the answer", "gpu_time.large_decode_gpu_s", 0.53),
    ("0.67 GPU-s per 70B message", "gpu_time.large_gpu_s", 0.67),
    (
        "1.05 GPU-s to read the prompt without the cache",
        "gpu_time.large_prefill_gpu_s_no_cache",
        1.05,
    ),
    ("0.18 GPU-s per 8B message", "gpu_time.small_gpu_s", 0.18),
    ("about 470 GPUs of prefill at the peak", "gpu_time.prefill_gpus_peak", 470),
    ("about 3,600 GPUs of prefill without the cache", "gpu_time.prefill_gpus_peak_no_cache", 3600),
    ("about 2,350 busy GPUs", "fleet.busy_gpus_large_only", 2350),
    ("about 3,000 GPUs with 30 % spare", "fleet.fleet_large_only", 3000),
    ("about 1,500 GPUs with 70 % on the 8B", "fleet.fleet_routed", 1500),
    ("$2.20 per 1,000 messages on the 70B alone", "cost.per_1000_large_only", 2.20),
    ("about $1.10 per 1,000 messages routed", "cost.per_1000_routed", 1.10),
    ("about $8 per 1,000 messages on a hosted API", "cost.api_per_1000", 8),
    ("self-hosting is 28 % of the API bill", "cost.self_hosted_share_of_api", 0.28),
    ("1.1 GB of KV cache per conversation", "memory.kv_gb_per_conversation", 1.1),
    ("about 210,000 conversations between turns", "memory.waiting_conversations_peak", 210_000),
    ("their KV cache adds up to 230 TB", "memory.kv_tb_between_turns", 230),
    ("6,900 conversation writes a second", "memory.writes_per_s_peak", 6900),
    ("91 TB of conversations a year", "memory.storage_tb_per_year", 91),
]

# (what sizing 002 says, where the planner keeps it, the published figure)
SPEC_002_FIGURES = [
    ("160 GB of KV budget per node", "memory.kv_budget_gb", 160),
    ("2.62 GB per 8,000-token session", "memory.session_gb", 2.62),
    ("61 sessions per node, naive", "memory.sessions_naive", 61),
    ("0.79 GB of shared prefix per node", "memory.prefix_gb", 0.79),
    ("1.84 GB of conversation per session", "memory.conversation_gb", 1.84),
    ("86 sessions per node, prefix shared", "memory.sessions_shared", 86),
    ("a warm cache on 55 % of turns", "slots.warm_hit_rate", 0.55),
    ("about 13.8 s waiting per turn", "slots.wait_s", 13.8),
    ("a slot held about 28.8 s per turn", "slots.slot_s_per_turn", 28.8),
    ("480 s of wall clock per session", "slots.session_s", 480),
    ("346 slot-seconds per session", "slots.slot_s_per_session", 346),
    ("a 1.39 duty cycle", "slots.duty_cycle", 1.39),
    ("120 sessions per node with the TTL", "fleet.sessions_per_node", 120),
    ("347 sessions a second arrive", "fleet.arrivals_per_s", 347),
    ("166,667 concurrent on average", "fleet.concurrent_avg", 166_667),
    ("366,667 concurrent at the peak", "fleet.concurrent_peak", 366_667),
    ("3,056 nodes", "fleet.nodes", 3056),
    ("12,222 GPUs", "fleet.gpus", 12_222),
    ("$733,320 a day", "fleet.dollars_per_day", 733_320),
    ("$267.7 M a year", "fleet.dollars_per_year", 267.7e6),
    ("360 M turns a day", "fleet.turns_per_day", 360e6),
    ("$0.002 per turn", "fleet.dollars_per_turn", 0.002),
    ("$2.20 per daily user a month", "fleet.dollars_per_user_month", 2.20),
    ("about 63 sessions decoding at once", "decode.decoding_per_node", 63),
    ("about 76 GB read per GPU per step", "decode.gb_read_per_gpu_step", 76),
    ("about 23 ms per decode step", "decode.step_ms", 23),
    ("about 43 tokens a second per answer", "decode.tokens_per_s", 43),
    ("bandwidth binds at about 139 per node", "decode.bandwidth_ceiling_per_node", 139),
    ("the 8B's 60 GB KV budget on one GPU", "small_model.kv_budget_gb", 60),
    ("about 113 concurrent per 8B GPU", "small_model.concurrent_per_gpu", 113),
    ("about 30 concurrent per 70B GPU", "small_model.large_concurrent_per_gpu", 30),
    ("3.8x the per-GPU concurrency", "small_model.per_gpu_ratio", 3.8),
]


@pytest.mark.parametrize(("figure", "result", "published"), SPEC_000_FIGURES)
def test_spec_000_figure(figure: str, result: str, published: float) -> None:
    assert attrgetter(result)(MESSAGES) == within(published), figure


@pytest.mark.parametrize(("figure", "result", "published"), SPEC_002_FIGURES)
def test_spec_002_figure(figure: str, result: str, published: float) -> None:
    assert attrgetter(result)(SESSIONS) == within(published), figure


def test_kv_bytes_per_token_of_the_70b_and_8b() -> None:
    # Sizing 000: "about 320 KB per token"; sizing 002: "0.33 MB per token, call it 320 KB".
    assert MESSAGES.memory.kv_bytes_per_token / 1024 == within(320)
    assert SESSIONS.memory.kv_bytes_per_token / 1e6 == within(0.33)
    # Sizing 002: MHA's 64 KV heads give 2.62 MB a token, 84 GB for a 32,000-token conversation.
    assert kv_bytes_per_token(80, 64, 128, 2) / 1e6 == within(2.62)
    assert 32_000 * kv_bytes_per_token(80, 64, 128, 2) / 1e9 == within(84)
    # Sizing 002: the 8B (32 layers, 8 KV heads, fp16) is 128 KB a token.
    assert SESSIONS.small_model.kv_bytes_per_token / 1024 == within(128)


def test_sharing_the_prefix() -> None:
    memory = SESSIONS.memory
    # 61 private copies of the prefix are "about 48 GB, or 30 % of the KV budget".
    assert memory.sessions_naive * memory.prefix_gb == within(48)
    assert memory.sessions_naive * memory.prefix_gb / memory.kv_budget_gb == within(0.30)
    # "86 sessions per node (+41 %)".
    assert memory.sessions_shared / memory.sessions_naive == within(1.41)


# --- the lever table of sizing 002 ---


def test_lever_table_rows() -> None:
    assert list(LEVERS) == [
        "baseline",
        "fp8 KV cache",
        "MHA instead of GQA",
        "prefix not shared",
        "compaction",
        "route to 8B",
    ]
    assert LEVERS["baseline"].gpus == SESSIONS.fleet.gpus
    assert LEVERS["baseline"].saving_per_year == 0


def test_fp8_halves_kv_and_doubles_concurrency() -> None:
    fp8 = plan_sessions(SessionInputs(kv_bytes_per_element=1))
    assert fp8.memory.kv_bytes_per_token == SESSIONS.memory.kv_bytes_per_token / 2
    # The prefix is paid once per node, so halving the cache slightly more than doubles.
    ratio = fp8.fleet.sessions_per_node / SESSIONS.fleet.sessions_per_node
    assert 2 <= ratio == within(2)
    assert LEVERS["fp8 KV cache"].gpus == pytest.approx(fp8.fleet.gpus)
    # "Halving the cache doubles concurrency and saves $134M a year."
    assert LEVERS["fp8 KV cache"].saving_per_year == within(134e6)


def test_mha_multiplies_kv_by_the_head_ratio() -> None:
    mha = plan_sessions(SessionInputs(kv_heads=64))
    assert mha.memory.kv_bytes_per_token == 8 * SESSIONS.memory.kv_bytes_per_token
    # "The GQA row is $1.93B a year": what GQA saves against MHA; MHA itself costs ~$2.2B.
    assert -LEVERS["MHA instead of GQA"].saving_per_year == within(1.93e9)
    assert LEVERS["MHA instead of GQA"].dollars_per_year == within(2.2e9)


def test_compaction_is_the_context_coefficient_with_the_sign_flipped() -> None:
    row = LEVERS["compaction"]
    saved_gpus = SESSIONS.fleet.gpus - row.gpus
    # 1,000 of 5,600 conversation tokens: "18 % of the fleet, roughly 2,200 GPUs and $48M".
    assert saved_gpus / SESSIONS.fleet.gpus == within(0.18)
    assert saved_gpus == within(2200)
    assert row.saving_per_year == within(48e6)


def test_routing_sessions_to_the_8b() -> None:
    # "Routing 60 % of sessions to the 8B saves $118M a year."
    assert LEVERS["route to 8B"].saving_per_year == within(118e6)
    all_small = plan_sessions(SessionInputs(small_session_share=1))
    assert {row.lever: row for row in all_small.levers}["route to 8B"].gpus < LEVERS[
        "route to 8B"
    ].gpus


def test_the_shared_prefix_is_worth_about_110m_a_year() -> None:
    assert -LEVERS["prefix not shared"].saving_per_year == within(110e6)


# --- inputs and their arithmetic ---


def test_routing_nothing_needs_the_70b_fleet() -> None:
    plan = plan_messages(MessageInputs(small_model_share=0))
    assert plan.fleet.fleet_routed == plan.fleet.fleet_large_only
    assert plan.cost.per_1000_routed == plan.cost.per_1000_large_only


def test_fleet_is_whole_replicas() -> None:
    assert whole_replicas(2314.3, 0.3, 4) == 3012  # 3,008.6 GPUs -> 753 replicas
    assert whole_replicas(100, 0.0, 4) == 100  # an exact fit buys no extra replica
    assert MESSAGES.fleet.fleet_large_only % 4 == 0


def test_without_the_cache_prefill_outweighs_decode() -> None:
    # Sizing 000's point: with no prefix cache, reading the prompt costs more than the answer.
    no_cache = plan_messages(MessageInputs(cached_history_share=0))
    assert no_cache.gpu_time.large_prefill_gpu_s > no_cache.gpu_time.large_decode_gpu_s
    assert MESSAGES.gpu_time.large_prefill_gpu_s < MESSAGES.gpu_time.large_decode_gpu_s


def test_a_longer_ttl_loses_the_duty_cycle() -> None:
    # Sizing 002: at a 90 s TTL the warm-hit rate is 0.97 and most of the 39 % gain is gone.
    long_ttl = plan_sessions(SessionInputs(ttl_s=90))
    assert long_ttl.slots.warm_hit_rate == within(0.97)
    assert long_ttl.slots.duty_cycle < SESSIONS.slots.duty_cycle
    assert long_ttl.fleet.gpus > SESSIONS.fleet.gpus


def test_bad_inputs_raise_a_specific_error() -> None:
    with pytest.raises(PlanInputError, match="share"):
        MessageInputs(small_model_share=2)
    with pytest.raises(PlanInputError, match="do not fit"):
        replace(SessionInputs(), weights_gb=1000)
