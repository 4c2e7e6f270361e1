"""One simulated replica's hardware and model, and how long one forward pass takes on it: the
slower of reading the weights and the KV cache over memory bandwidth, and the batch's FLOPs over
compute (a roofline), plus any cached blocks copied back from host RAM. Pure: no I/O, no clock.
The step loop that runs on it is domain/replica_sim.py.

Calibration against sizing 000. Decode: "each step reads the weights (140 GB over 4 GPUs) plus
100 x 1.1 GB of KV; at 3.35 TB/s a GPU one step takes about 30 ms" needs 62 % of the peak
bandwidth. Prefill: "reading 3,000 tokens takes 1.05 GPU-seconds" is 140 GFLOP a token at 40 %
of an H100's 989 dense TFLOPS, and then a full 512-token step takes about 45 ms (sizing 000's
"512 prompt tokens add about 45 ms", read as: such a step takes about 45 ms; read as 45 ms on
top of a 30 ms decode it would contradict sizing 000's own 20 tokens/s and 3.5 s). With those
two figures the single-server case comes out as sizing 000 tells it (see
tests/domain/test_replica_sim.py). Attention's own FLOPs, which grow with the context, are
left out as sizing 000 leaves them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

BLOCK_TOKENS: Final = 16  # tokens per KV cache block: memory is handed out in pages


@dataclass(frozen=True, slots=True)
class ReplicaPreset:
    """One replica's hardware and model. Bytes and FLOPs are decimal, as the sizings count."""

    name: str
    model: str
    params: float  # parameters; a token costs 2 FLOPs per parameter
    weight_bytes: float
    kv_bytes_per_token: float
    gpus: int
    hbm_bytes_per_s: float  # per GPU
    peak_flops: float  # per GPU, dense BF16
    kv_cache_bytes: float  # the whole replica's KV pool: memory less weights and activations
    host_kv_bytes: float  # host RAM for KV blocks spilled from the GPUs
    host_link_bytes_per_s: float  # per GPU, host RAM to GPU (PCIe)
    bandwidth_efficiency: float = 0.62
    flops_efficiency: float = 0.40
    step_tokens: int = 512
    context_tokens: int = 131_072
    # Answers in the batch at most (vLLM's max_num_seqs). Sizing 000 sizes its fleet on "about
    # 100 people at once" a server; without a cap the batch grows until the KV cache is full.
    max_running: int = 100

    @property
    def kv_blocks(self) -> int:
        return int(self.kv_cache_bytes // (self.kv_bytes_per_token * BLOCK_TOKENS))

    @property
    def host_blocks(self) -> int:
        return int(self.host_kv_bytes // (self.kv_bytes_per_token * BLOCK_TOKENS))


# Sizing 000's large model: a 70B on four 80 GB H100s. KV: 80 layers x 8 KV heads x 128 x 2 (K, V)
# x 2 bytes = 327,680 B a token ("about 320 KB"). KV pool: 320 GB - 140 GB - 4 x 5 GB of
# activations = 160 GB. Host RAM: "about 300 GB per server".
H100x4_70B = ReplicaPreset(
    name="70b-4xh100",
    model="llama-70b",
    params=70e9,
    weight_bytes=140e9,
    kv_bytes_per_token=327_680,
    gpus=4,
    hbm_bytes_per_s=3.35e12,
    peak_flops=989e12,
    kv_cache_bytes=160e9,
    host_kv_bytes=300e9,
    host_link_bytes_per_s=50e9,
)

# Sizing 000's small model: an 8B on one H100. KV: 32 layers x 8 x 128 x 2 x 2 B = 131,072 B a
# token; the KV budget is 80 GB - 16 GB of weights - 4 GB of activations = 60 GB. Sizing 000 gives
# no step time for it, only its cost: 0.18 GPU-seconds a message against the 70B's 0.67. At the
# 70B's 62 % of peak bandwidth the 8B would cost 0.21 of the 70B's GPU time on the same
# messages; 48 % makes it sizing 000's 0.27 (a small model's short kernels use less of the
# bandwidth). Measured on a saturated replica, batch 100, 3,000-token prompts 87 % cached.
H100_8B = ReplicaPreset(
    name="8b-1xh100",
    model="llama-8b",
    params=8e9,
    weight_bytes=16e9,
    kv_bytes_per_token=131_072,
    gpus=1,
    hbm_bytes_per_s=3.35e12,
    peak_flops=989e12,
    kv_cache_bytes=60e9,
    host_kv_bytes=300e9,
    host_link_bytes_per_s=50e9,
    bandwidth_efficiency=0.48,
)

PRESETS = {preset.name: preset for preset in (H100x4_70B, H100_8B)}


def step_seconds(
    preset: ReplicaPreset, batch_tokens: int, kv_tokens_read: int, host_blocks_loaded: int = 0
) -> float:
    """One forward pass: memory-bound when the batch is small (decode), compute-bound when it
    holds prompt chunks (prefill); a pass waits for the slower of the two."""
    bytes_read = preset.weight_bytes + preset.kv_bytes_per_token * kv_tokens_read
    memory_s = bytes_read / (preset.gpus * preset.hbm_bytes_per_s * preset.bandwidth_efficiency)
    flops = 2.0 * preset.params * batch_tokens
    compute_s = flops / (preset.gpus * preset.peak_flops * preset.flops_efficiency)
    host_bytes = host_blocks_loaded * BLOCK_TOKENS * preset.kv_bytes_per_token
    return max(memory_s, compute_s) + host_bytes / (preset.gpus * preset.host_link_bytes_per_s)


__all__ = ["BLOCK_TOKENS", "H100_8B", "PRESETS", "H100x4_70B", "ReplicaPreset", "step_seconds"]
