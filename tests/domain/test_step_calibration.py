"""Calibrating the simulator's step time against measured steps: domain.step_calibration (the
fit, the GPU table, the rows), and bench/calibrate_gpu.py's code path on a CPU through the
vLLM venv's torch, where that venv exists."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path

import pytest

from domain.replica_hardware import H100_8B, ReplicaPreset, step_seconds
from domain.step_calibration import (
    KNOWN_GPUS,
    StepTiming,
    calibrate,
    find_gpu,
    fit_bandwidth_efficiency,
    fit_flops_efficiency,
    gpu_preset,
    predicted_seconds,
)

ROOT = Path(__file__).resolve().parents[2]
TORCH_PYTHON = ROOT / ".vllm" / "venv" / "bin" / "python"
RESULTS = ROOT / "bench" / "results" / "calibrate_gpu.txt"
BATCHES = (1, 2, 4, 8, 16, 32, 64)
CONTEXTS = (1024, 2048, 4096)
H200 = gpu_preset("NVIDIA H200")


def decode_times(truth: ReplicaPreset) -> list[StepTiming]:
    """The decode grid as `truth` would time it: every point memory-bound."""
    return [
        StepTiming(batch, context, step_seconds(truth, batch, batch * context))
        for context in CONTEXTS
        for batch in BATCHES
    ]


def prefill_times(truth: ReplicaPreset) -> list[StepTiming]:
    return [
        StepTiming(batch, 512, step_seconds(truth, batch * 512, batch * 512), prefill=True)
        for batch in (1, 2, 4)
    ]


def squared_error(preset: ReplicaPreset, timings: list[StepTiming]) -> float:
    return sum((t.seconds - predicted_seconds(preset, t)) ** 2 for t in timings)


@pytest.mark.parametrize("preset", [H100_8B, H200], ids=["h100", "h200"])
def test_the_fit_recovers_the_bandwidth_efficiency_that_made_the_times(
    preset: ReplicaPreset,
) -> None:
    timings = decode_times(dataclasses.replace(preset, bandwidth_efficiency=0.7))
    assert fit_bandwidth_efficiency(preset, timings) == pytest.approx(0.7, abs=1e-6)
    calibration = calibrate(preset, timings)
    assert calibration.fitted.bandwidth_efficiency == pytest.approx(0.7, abs=1e-6)
    # The fitted model then predicts every point exactly, and the preset itself is untouched.
    for row in calibration.rows:
        assert row.fitted_s == pytest.approx(row.timing.seconds, rel=1e-9)
    assert calibration.preset == preset
    assert calibration.fitted.flops_efficiency == preset.flops_efficiency
    assert not calibration.flops_fitted


def test_prefill_steps_fit_the_compute_efficiency_too() -> None:
    truth = dataclasses.replace(H200, bandwidth_efficiency=0.8, flops_efficiency=0.55)
    # Check the premise: 512-token steps are compute-bound, decode steps memory-bound.
    prefill = prefill_times(truth)
    memory_only = dataclasses.replace(truth, peak_flops=math.inf)
    assert all(t.seconds > predicted_seconds(memory_only, t) for t in prefill)
    assert fit_flops_efficiency(H200, prefill) == pytest.approx(0.55, abs=1e-6)
    calibration = calibrate(H200, decode_times(truth) + prefill)
    assert calibration.flops_fitted
    assert calibration.fitted.bandwidth_efficiency == pytest.approx(0.8, abs=1e-6)
    assert calibration.fitted.flops_efficiency == pytest.approx(0.55, abs=1e-6)


def test_the_closed_form_is_the_least_squares_fit_of_noisy_times() -> None:
    noise = [1.0 + 0.1 * math.sin(7 * i) for i in range(len(BATCHES) * len(CONTEXTS))]
    exact = decode_times(dataclasses.replace(H200, bandwidth_efficiency=0.65))
    noisy = [
        dataclasses.replace(t, seconds=t.seconds * k) for t, k in zip(exact, noise, strict=True)
    ]
    best = fit_bandwidth_efficiency(H200, noisy)
    assert best != pytest.approx(0.65, abs=1e-4)  # the noise moved it: not a trivial case
    error = squared_error(dataclasses.replace(H200, bandwidth_efficiency=best), noisy)
    for nudge in (0.999, 1.001):
        worse = dataclasses.replace(H200, bandwidth_efficiency=best * nudge)
        assert squared_error(worse, noisy) > error


def test_rows_carry_the_prediction_and_the_ratio() -> None:
    batch, context = 8, 2048
    predicted = step_seconds(H200, batch_tokens=batch, kv_tokens_read=batch * context)
    assert predicted == pytest.approx(
        (H200.weight_bytes + H200.kv_bytes_per_token * batch * context)
        / (4.8e12 * H200.bandwidth_efficiency)
    )
    timings = [StepTiming(batch, context, 2 * predicted), StepTiming(1, 1024, 0.01)]
    rows = calibrate(H200, timings).rows
    assert [row.timing for row in rows] == timings
    assert rows[0].predicted_s == predicted
    assert rows[0].ratio == pytest.approx(2.0)
    assert rows[1].ratio == pytest.approx(0.01 / step_seconds(H200, 1, 1024))


@pytest.mark.parametrize(
    ("device_name", "hbm_bytes_per_s", "peak_flops"),
    [
        ("NVIDIA H200", 4.8e12, 989e12),
        ("NVIDIA H100 80GB HBM3", 3.35e12, 989e12),
        ("NVIDIA H100 PCIe", 2.0e12, 756e12),
        ("NVIDIA A100-SXM4-80GB", 2.039e12, 312e12),
        ("NVIDIA A100-PCIE-40GB", 1.555e12, 312e12),
        ("NVIDIA L40S", 864e9, 362e12),
    ],
)
def test_known_gpus_come_from_the_table(
    device_name: str, hbm_bytes_per_s: float, peak_flops: float
) -> None:
    preset = gpu_preset(device_name)
    assert (preset.hbm_bytes_per_s, preset.peak_flops) == (hbm_bytes_per_s, peak_flops)
    # Only the GPU changes: the model and the efficiencies stay the simulator's 8B.
    assert preset.gpus == 1
    assert preset.weight_bytes == H100_8B.weight_bytes
    assert preset.bandwidth_efficiency == H100_8B.bandwidth_efficiency


@pytest.mark.parametrize("device_name", ["NVIDIA GH200 480GB", "NVIDIA B200", "cpu"])
def test_an_unknown_gpu_needs_both_figures(device_name: str) -> None:
    assert find_gpu(device_name) is None  # a GH200 is no H200
    with pytest.raises(ValueError, match=r"unknown GPU .*--hbm-gbps, --tflops"):
        gpu_preset(device_name)
    with pytest.raises(ValueError, match="unknown GPU"):
        gpu_preset(device_name, hbm_gbps=8000)
    preset = gpu_preset(device_name, hbm_gbps=8000, tflops=2250)
    assert (preset.hbm_bytes_per_s, preset.peak_flops) == (8e12, 2.25e15)


def test_given_figures_win_over_the_table() -> None:
    preset = gpu_preset("NVIDIA H200", hbm_gbps=4000)
    assert (preset.hbm_bytes_per_s, preset.peak_flops) == (4e12, 989e12)
    with pytest.raises(ValueError, match="positive"):
        gpu_preset("NVIDIA H200", tflops=0)
    assert len({gpu.name for gpu in KNOWN_GPUS}) == len(KNOWN_GPUS)


@pytest.mark.parametrize("seconds", [0.0, -0.005, math.nan, math.inf])
def test_a_step_time_must_be_positive(seconds: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        StepTiming(1, 1024, seconds)


def test_a_fit_needs_steps_of_its_kind() -> None:
    with pytest.raises(ValueError, match="positive"):
        StepTiming(0, 1024, 0.01)
    prefill = prefill_times(H200)
    with pytest.raises(ValueError, match="decode steps"):
        calibrate(H200, prefill)
    with pytest.raises(ValueError, match="decode steps"):
        fit_bandwidth_efficiency(H200, [])
    with pytest.raises(ValueError, match="prefill steps"):
        fit_flops_efficiency(H200, decode_times(H200))


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not TORCH_PYTHON.exists(), reason="no .vllm/venv: torch is not installed")
def test_the_cpu_smoke_run_prints_one_table_and_publishes_nothing() -> None:
    before = RESULTS.read_bytes() if RESULTS.exists() else None
    run = subprocess.run(
        [str(TORCH_PYTHON), "bench/calibrate_gpu.py", "--cpu-smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    header = lines.index("phase    batch  context  measured ms  predicted ms  ratio  fitted ms")
    rows = [line.split() for line in lines[header + 1 : header + 6]]
    expected = [("decode", 1, 64), ("decode", 2, 64), ("decode", 1, 128), ("decode", 2, 128)]
    assert [(r[0], int(r[1]), int(r[2])) for r in rows] == [*expected, ("prefill", 1, 32)]
    for row in rows:  # measured / predicted, as printed to two decimals
        measured, predicted, ratio = float(row[3]), float(row[4]), float(row[5])
        assert ratio == pytest.approx(measured / predicted, abs=0.01 + 0.01 * ratio)
    result = json.loads(lines[-1])
    assert result["bench"] == "calibrate_gpu"
    assert len(result["points"]) == 5
    assert result["bandwidth_efficiency"]["fitted"] > 0
    assert result["flops_efficiency"]["fitted"] > 0
    assert (RESULTS.read_bytes() if RESULTS.exists() else None) == before
