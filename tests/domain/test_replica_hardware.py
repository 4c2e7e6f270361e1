"""The simulated replica's hardware against sizing 000: its presets and its step time."""

from __future__ import annotations

import dataclasses

import pytest

from domain.replica_hardware import H100_8B, PRESETS, H100x4_70B, step_seconds


def test_presets_carry_the_spec_figures() -> None:
    assert PRESETS == {"70b-4xh100": H100x4_70B, "8b-1xh100": H100_8B}
    assert H100x4_70B.weight_bytes == 140e9 and H100x4_70B.gpus == 4
    assert H100x4_70B.hbm_bytes_per_s == 3.35e12
    assert H100x4_70B.kv_bytes_per_token == 320 * 1024  # "about 320 KB per token"
    assert H100x4_70B.step_tokens == 512
    assert H100_8B.gpus == 1 and H100_8B.weight_bytes == 16e9
    with pytest.raises(dataclasses.FrozenInstanceError):
        H100x4_70B.gpus = 8  # type: ignore[misc]


def test_step_time_follows_the_spec_hardware_model() -> None:
    # "100 x 1.1 GB ... at 3.35 TB a second per GPU, one step takes about 30 ms."
    decode = step_seconds(H100x4_70B, batch_tokens=100, kv_tokens_read=100 * 3_400)
    assert decode == pytest.approx(0.030, rel=0.05)
    # "512 prompt tokens add about 45 ms on four GPUs": the step becomes compute-bound.
    assert step_seconds(H100x4_70B, 512, 100 * 3_400) == pytest.approx(0.045, rel=0.05)
    # Twice the answers double the KV read and drop everyone below reading speed (30 tok/s).
    assert 1 / step_seconds(H100x4_70B, 200, 200 * 3_400) < 30
    # "Reading 3,000 tokens takes 1.05 GPU-seconds": 6 full steps and a bit, on 4 GPUs.
    prefill_gpu_s = 4 * 3_000 / 512 * step_seconds(H100x4_70B, 512, 0)
    assert prefill_gpu_s == pytest.approx(1.05, rel=0.05)
