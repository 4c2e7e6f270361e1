"""Calibrating the replica simulator's step-time model against step times measured on a GPU.

`domain.replica_hardware.step_seconds` is a roofline: a step takes the longer of its bytes over the
GPU's bandwidth times `bandwidth_efficiency` and its FLOPs over the GPU's peak times
`flops_efficiency`. Both factors came from sizing 000's figures (domain/replica_hardware.py). This
module takes decode (and, optionally, prefill) steps timed on a real GPU (bench/calibrate_gpu.py
times them), predicts each with `step_seconds` for that GPU, and fits the two factors that best
explain them.

A decode step of B sequences with C tokens cached each reads the weights plus B x C tokens of
KV, which the simulator counts as `step_seconds(preset, batch_tokens=B, kv_tokens_read=B*C)`;
decode is memory-bound, so its time is bytes / (gpus x hbm x e). A prefill step of B prompts
of C tokens is `step_seconds(preset, batch_tokens=B*C, kv_tokens_read=B*C)`, compute-bound, so
its time is FLOPs / (gpus x peak x e). Either way the model is t = x / e with x the step's
time at full speed, and the efficiency comes from least squares on the time itself:
minimising sum (t_i - k x_i)^2 over k = 1/e gives k = sum x_i t_i / sum x_i^2, so

    e = sum x_i^2 / sum x_i t_i

Least squares on time, not on the ratio, as the simulator adds up step times: a step that
takes longer weighs more in a simulated minute. Pure: no I/O, no clock, no torch.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from domain.replica_hardware import H100_8B, ReplicaPreset, step_seconds


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU model's datasheet figures: the peak the simulator's efficiencies scale."""

    name: str
    match: frozenset[str]  # every one of these is a word of torch's device name (any case)
    hbm_bytes_per_s: float
    peak_flops: float  # dense BF16, without sparsity


def _gpu(name: str, words: str, hbm_bytes_per_s: float, peak_flops: float) -> Gpu:
    return Gpu(name, frozenset(words.split()), hbm_bytes_per_s, peak_flops)


# Most specific first: "NVIDIA H100 PCIe" must not be taken for an SXM H100. Words, not
# substrings, so that a GH200 is not an H200. Figures from NVIDIA's datasheets.
KNOWN_GPUS: tuple[Gpu, ...] = (
    _gpu("H200 NVL", "H200 NVL", 4.8e12, 835e12),
    _gpu("H200", "H200", 4.8e12, 989e12),
    _gpu("H100 NVL", "H100 NVL", 3.9e12, 835e12),
    _gpu("H100 PCIe", "H100 PCIE", 2.0e12, 756e12),
    _gpu("H100", "H100", 3.35e12, 989e12),
    _gpu("A100 40GB", "A100 40GB", 1.555e12, 312e12),
    _gpu("A100 80GB PCIe", "A100 PCIE", 1.935e12, 312e12),
    _gpu("A100 80GB", "A100", 2.039e12, 312e12),
    _gpu("L40S", "L40S", 864e9, 362e12),
)


def find_gpu(device_name: str) -> Gpu | None:
    """The known GPU that torch's device name (e.g. "NVIDIA H100 80GB HBM3") names, if any."""
    words = frozenset(re.split(r"[^0-9A-Z]+", device_name.upper()))
    return next((gpu for gpu in KNOWN_GPUS if gpu.match <= words), None)


def gpu_preset(
    device_name: str,
    hbm_gbps: float | None = None,
    tflops: float | None = None,
    base: ReplicaPreset = H100_8B,
) -> ReplicaPreset:
    """`base`'s model on one GPU of this name. Given figures (GB/s, dense BF16 TFLOPS) win over
    the table's; a GPU the table lacks needs both."""
    gpu = find_gpu(device_name)
    if gpu is None and (hbm_gbps is None or tflops is None):
        known = ", ".join(known.name for known in KNOWN_GPUS)
        raise ValueError(
            f"unknown GPU {device_name!r} (known: {known}): give its HBM bandwidth in GB/s and "
            "its dense BF16 peak in TFLOPS (--hbm-gbps, --tflops)"
        )
    hbm = hbm_gbps * 1e9 if hbm_gbps is not None else _known(gpu).hbm_bytes_per_s
    flops = tflops * 1e12 if tflops is not None else _known(gpu).peak_flops
    if not (_positive(hbm) and _positive(flops)):
        raise ValueError(f"bandwidth and peak must be positive, not {hbm_gbps} GB/s, {tflops} TF")
    label = gpu.name if gpu is not None else device_name
    return dataclasses.replace(
        base, name=f"{base.model} on 1x {label}", gpus=1, hbm_bytes_per_s=hbm, peak_flops=flops
    )


def _known(gpu: Gpu | None) -> Gpu:
    assert gpu is not None  # gpu_preset checked: a figure not given comes from the table
    return gpu


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@dataclass(frozen=True, slots=True)
class StepTiming:
    """One forward pass timed on a GPU: `batch` sequences of `context` tokens each. Decode:
    one new token each, `context` already cached. Prefill: `context` prompt tokens each."""

    batch: int
    context: int
    seconds: float
    prefill: bool = False

    def __post_init__(self) -> None:
        if self.batch < 1 or self.context < 1:
            raise ValueError(f"batch and context must be positive: {self}")
        if not _positive(self.seconds):  # a zero or NaN would divide the fit by nothing
            raise ValueError(f"a step time must be positive and finite: {self}")

    @property
    def batch_tokens(self) -> int:
        return self.batch * self.context if self.prefill else self.batch

    @property
    def kv_tokens_read(self) -> int:
        return self.batch * self.context


def predicted_seconds(preset: ReplicaPreset, timing: StepTiming) -> float:
    return step_seconds(
        preset, batch_tokens=timing.batch_tokens, kv_tokens_read=timing.kv_tokens_read
    )


def _memory_seconds_at_peak(preset: ReplicaPreset, timing: StepTiming) -> float:
    # step_seconds' memory term with an efficiency of 1
    read = preset.weight_bytes + preset.kv_bytes_per_token * timing.kv_tokens_read
    return read / (preset.gpus * preset.hbm_bytes_per_s)


def _compute_seconds_at_peak(preset: ReplicaPreset, timing: StepTiming) -> float:
    # step_seconds' compute term with an efficiency of 1
    return 2.0 * preset.params * timing.batch_tokens / (preset.gpus * preset.peak_flops)


def _fit(at_peak: Sequence[float], measured: Sequence[float]) -> float:
    # t = x / e, least squares on t over k = 1 / e (see the module's docstring)
    return sum(x * x for x in at_peak) / sum(x * t for x, t in zip(at_peak, measured, strict=True))


def fit_bandwidth_efficiency(preset: ReplicaPreset, decode: Sequence[StepTiming]) -> float:
    """The bandwidth efficiency that best explains these decode steps, as memory-bound."""
    if not decode or any(timing.prefill for timing in decode):
        raise ValueError("fitting the bandwidth needs decode steps, and only decode steps")
    at_peak = [_memory_seconds_at_peak(preset, timing) for timing in decode]
    return _fit(at_peak, [timing.seconds for timing in decode])


def fit_flops_efficiency(preset: ReplicaPreset, prefill: Sequence[StepTiming]) -> float:
    """The compute efficiency that best explains these prefill steps, as compute-bound."""
    if not prefill or not all(timing.prefill for timing in prefill):
        raise ValueError("fitting the compute needs prefill steps, and only prefill steps")
    at_peak = [_compute_seconds_at_peak(preset, timing) for timing in prefill]
    return _fit(at_peak, [timing.seconds for timing in prefill])


@dataclass(frozen=True, slots=True)
class CalibrationRow:
    timing: StepTiming
    predicted_s: float  # with the preset's own efficiencies
    fitted_s: float  # with the fitted ones

    @property
    def ratio(self) -> float:
        """Measured over predicted: above 1, the simulator runs this step too fast."""
        return self.timing.seconds / self.predicted_s


@dataclass(frozen=True, slots=True)
class Calibration:
    preset: ReplicaPreset  # as given
    fitted: ReplicaPreset  # the same with the fitted efficiencies
    rows: tuple[CalibrationRow, ...]
    flops_fitted: bool  # False: no prefill steps, so `fitted` keeps the preset's compute factor


def calibrate(preset: ReplicaPreset, timings: Sequence[StepTiming]) -> Calibration:
    """Fits the bandwidth factor to the decode steps (at least one needed) and the compute factor
    to the prefill steps, if any, and sets each step's prediction before and after."""
    decode = [timing for timing in timings if not timing.prefill]
    prefill = [timing for timing in timings if timing.prefill]
    fitted = dataclasses.replace(
        preset,
        bandwidth_efficiency=fit_bandwidth_efficiency(preset, decode),
        flops_efficiency=(
            fit_flops_efficiency(preset, prefill) if prefill else preset.flops_efficiency
        ),
    )
    rows = tuple(
        CalibrationRow(timing, predicted_seconds(preset, timing), predicted_seconds(fitted, timing))
        for timing in timings
    )
    return Calibration(preset, fitted, rows, flops_fitted=bool(prefill))
