"""The planner's inputs: each sizing's figures as defaults, checked when they are constructed."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

SECONDS_PER_DAY = 86_400
HOURS_PER_DAY = 24
DAYS_PER_YEAR = 365
# Both sizings count memory in decimal units: 8,000 tokens x 327,680 B is their "2.62 GB".
GB = 1e9
TB = 1e12

# --- Per-token GPU cost of the 70B and 8B models (sizing 000) ---
# "Writing a 400-token answer takes about 0.53 GPU-seconds."
LARGE_DECODE_GPU_S_PER_TOKEN = 0.53 / 400
# "Reading all 3,000 tokens again would take 1.05 GPU-seconds." The cached case (390 tokens in
# 0.14 GPU-seconds) gives 0.00036 a token, the same figure within sizing 000's rounding.
LARGE_PREFILL_GPU_S_PER_TOKEN = 1.05 / 3000
# The 8B is only given per message: about 0.18 GPU-seconds where the 70B needs 0.67 for the same
# message. Both of its per-token costs are the 70B's scaled by that ratio.
SMALL_TO_LARGE_COST = 0.18 / 0.67
SMALL_DECODE_GPU_S_PER_TOKEN = LARGE_DECODE_GPU_S_PER_TOKEN * SMALL_TO_LARGE_COST
SMALL_PREFILL_GPU_S_PER_TOKEN = LARGE_PREFILL_GPU_S_PER_TOKEN * SMALL_TO_LARGE_COST


class PlanInputError(ValueError):
    """An input the planner cannot size from; `run_plan` turns it into exit code 2."""


def flag(name: str) -> str:
    """The command-line flag of an input: daily_users is --daily-users."""
    return "--" + name.replace("_", "-")


def _check_finite_and_sign(
    inputs: MessageInputs | SessionInputs, shares: set[str], may_be_zero: set[str]
) -> None:
    for item in fields(inputs):
        value = getattr(inputs, item.name)
        option = flag(item.name)
        if not math.isfinite(value):
            raise PlanInputError(f"{option} must be a finite number, not {value}")
        if item.name in shares and not 0 <= value <= 1:
            raise PlanInputError(f"{option} is a share and must lie in 0..1, not {value}")
        if item.name in may_be_zero and value < 0:
            raise PlanInputError(f"{option} must not be negative, not {value}")
        if item.name not in shares | may_be_zero and value <= 0:
            raise PlanInputError(f"{option} must be greater than 0, not {value}")


@dataclass(frozen=True, slots=True)
class MessageInputs:
    """Sizing 000: fleet from messages a day and the GPU-seconds each message costs."""

    daily_users: float = 10_000_000
    messages_per_user: float = 10
    peak_factor: float = 3.0
    prompt_tokens: float = 3000
    # Sizing 000's 390 uncached tokens are the new message plus the 10 % of history the cache
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
    # Sizing 000 adds "the team" to the GPU bill without a figure. Its two published costs,
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
    # The same 70B as sizing 002 (80 layers, 8 KV heads of 128, fp16): sizing 000's 320 KB
    # a token.
    layers: int = 80
    kv_heads: int = 8
    head_dim: int = 128
    kv_bytes_per_element: float = 2
    think_time_s: float = 60
    stored_bytes_per_message: float = 2500
    # A message stores the question and the answer: 3,500 messages/s are "7,000 writes".
    writes_per_message: float = 2
    # "One region can get about 3,000 GPUs" (sizing 000's step 6): past it, more regions.
    region_gpu_cap: float = 3000

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
    """Sizing 002: fleet from the KV-cache bytes each resident conversation holds."""

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
    # Sizing 002 gives the 8B "a 60 GB KV budget on one GPU": 80 - 16 GB of weights - this.
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
