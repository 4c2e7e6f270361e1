"""Calibrates the replica simulator's step-time model on a GPU: times decode steps of a randomly
initialised Llama-3-8B shape in BF16 with PyTorch, and compares them with `step_seconds`.

    python bench/calibrate_gpu.py [--hbm-gbps G --tflops T] [--eager] [--budget-s 420]
    .vllm/venv/bin/python bench/calibrate_gpu.py --cpu-smoke

Needs torch and transformers (no weights: the model is built from its config, on the GPU).
Decode: batches 1-64 x contexts 1k-4k, each a one-token step over a KV cache of random values
filled in place (no prefill pass), skipping any point whose cache would pass 85 % of the free
memory; a few 512-token prefill steps fit the compute factor as well. Each point is the
median of 10 steps after 3 warm-up steps, replayed from a CUDA graph as an engine such as vLLM
runs its decode steps (--eager times plain PyTorch calls: at small batches that measures the
Python dispatching a step's ~600 kernels, not the GPU). The GPU's peak figures come from
`domain.step_calibration.KNOWN_GPUS` by its device name, or from --hbm-gbps and --tflops.

Goal: runs in under 8 minutes on an H200 and prints one table, measured against predicted
with the simulator's current factors and with the fitted ones; the fitted factors are what
`ReplicaPreset.bandwidth_efficiency` and `flops_efficiency` should become. Ends with one JSON
line. Results land in bench/results/calibrate_gpu.txt. Without CUDA it exits with status 2;
--cpu-smoke instead runs a tiny model in float32 on one CPU thread to check the code path, and
publishes nothing.

What it measures is PyTorch's SDPA decode, not vLLM's paged attention: a lower bound on what a
tuned engine gets from the same GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchkit import publish

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from domain.replica_hardware import H100_8B, ReplicaPreset
from domain.step_calibration import Calibration, StepTiming, calibrate, gpu_preset

NAME = "calibrate_gpu"
NO_GPU = 2  # exit status without CUDA, torch, or a GPU the table knows
MEMORY_SHARE = 0.85  # of the free memory a point's KV cache may take
ACTIVATION_BYTES = 2 << 30  # a decode step's activations, logits and CUDA graph pool, and then some


@dataclass(frozen=True, slots=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_heads * self.head_dim
        layer = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden  # and 2 norms
        return 2 * self.vocab * self.hidden + self.layers * layer + self.hidden  # embeddings, head

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return self.layers * self.kv_heads * self.head_dim * 2 * dtype_bytes  # K and V


LLAMA3_8B = ModelShape(
    hidden=4096, layers=32, heads=32, kv_heads=8, intermediate=14_336, vocab=128_256
)
TINY = ModelShape(hidden=256, layers=2, heads=4, kv_heads=2, intermediate=512, vocab=1_024)


@dataclass(frozen=True, slots=True)
class Plan:
    """What one run measures, and where."""

    shape: ModelShape
    device: str
    dtype_name: str  # a torch dtype's attribute name: "bfloat16", "float32"
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    prefill_batches: tuple[int, ...]
    prefill_tokens: int
    warmup: int
    repeats: int
    graphs: bool
    budget_s: float
    smoke: bool


@dataclass(slots=True)
class Progress:
    """What the measuring learned along the way, for the table's header and the JSON line."""

    started: float
    graphs: bool  # decode steps replayed from CUDA graphs: False once the first capture failed
    graphed_points: int = 0
    skipped: list[dict[str, Any]] = field(default_factory=list)


def log(message: str) -> None:
    print(f"[{NAME}] {message}", file=sys.stderr, flush=True)


def plan_for(args: argparse.Namespace) -> Plan:
    if args.cpu_smoke:
        return Plan(
            shape=TINY,
            device="cpu",
            dtype_name="float32",
            batches=(1, 2),
            contexts=(64, 128),
            prefill_batches=(1,),
            prefill_tokens=32,
            warmup=1,
            repeats=3,
            graphs=False,
            budget_s=60.0,
            smoke=True,
        )
    return Plan(
        shape=LLAMA3_8B,
        device="cuda",
        dtype_name="bfloat16",
        batches=(1, 2, 4, 8, 16, 32, 64),
        contexts=(1024, 2048, 4096),
        prefill_batches=(1, 2, 4),  # 512-token steps, as the simulator's step budget
        prefill_tokens=512,
        warmup=args.warmup,
        repeats=args.repeats,
        graphs=not args.eager,
        budget_s=args.budget_s,
        smoke=False,
    )


def build_model(plan: Plan) -> Any:
    """A randomly initialised Llama of `plan.shape`, made on its device in its dtype at once:
    no float32 copy on the host first, and nothing downloaded."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    shape = plan.shape
    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=8192,
        tie_word_embeddings=False,  # as Llama-3-8B: the output head is a matrix of its own
    )
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, plan.dtype_name))
    try:
        with torch.device(plan.device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def fixed_layer_class() -> type:
    """A cache layer holding a full context plus one slot that each step overwrites in place, as
    a paged engine writes its new token. transformers' own layers would each distort the bytes a
    step moves: DynamicLayer's torch.cat copies the whole cache every step, and StaticLayer
    makes the model pass SDPA a mask, which then expands the 8 KV heads to 32 in memory."""
    from transformers.cache_utils import DynamicLayer

    class FixedLayer(DynamicLayer):
        def __init__(self, keys: Any, values: Any) -> None:
            super().__init__()
            self.keys, self.values = keys, values
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True
            self.context = keys.shape[-2] - 1

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            self.keys[:, :, self.context :].copy_(key_states)
            self.values[:, :, self.context :].copy_(value_states)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.context

    return FixedLayer


def random_cache(plan: Plan, layer_class: type, batch: int, context: int) -> Any:
    """A cache of `context` random tokens per sequence: filling it costs no prefill pass."""
    import torch
    from transformers.cache_utils import Cache

    shape = plan.shape
    size = (batch, shape.kv_heads, context + 1, shape.hidden // shape.heads)
    dtype = getattr(torch, plan.dtype_name)

    def tensor() -> Any:
        return torch.randn(size, dtype=dtype, device=plan.device)

    return Cache(layers=[layer_class(tensor(), tensor()) for _ in range(shape.layers)])


class CacheMismatch(RuntimeError):
    """The in-place cache does not compute what transformers' own cache computes."""


def check_cache(model: Any, plan: Plan, layer_class: type) -> None:
    """The fixed cache must give the logits transformers' own DynamicCache gives for the same
    tokens, and keep its size: a transformers whose cache API moved would otherwise have this
    time some other computation without a word."""
    import torch
    from transformers import DynamicCache

    context = min(plan.contexts)
    fixed = random_cache(plan, layer_class, 1, context)
    reference = DynamicCache(config=model.config)
    for index, layer in enumerate(fixed.layers):
        keys, values = layer.keys[:, :, :context], layer.values[:, :, :context]
        reference.update(keys.clone(), values.clone(), index)
    ids = torch.randint(plan.shape.vocab, (1, 1), device=plan.device)
    with torch.inference_mode():
        got, want = (
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            .logits.float()
            .cpu()
            for cache in (fixed, reference)
        )
    size = fixed.layers[0].keys.shape[-2]
    if size != context + 1 or not torch.allclose(got, want, atol=0.02 * float(want.abs().max())):
        raise CacheMismatch(
            f"a decode step over the in-place cache (now {size} tokens, was {context + 1}) does "
            f"not match one over a DynamicCache (logits differ by up to "
            f"{float((got - want).abs().max()):.3g}): this transformers' cache API is not the one "
            "this script was written for (5.19)"
        )


def synchronizer(plan: Plan) -> Callable[[], None]:
    import torch

    return torch.cuda.synchronize if plan.device == "cuda" else lambda: None


def median_seconds(step: Callable[[], object], plan: Plan) -> float:
    sync = synchronizer(plan)
    for _ in range(plan.warmup):
        step()
    sync()
    times = []
    for _ in range(plan.repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def graphed(step: Callable[[], object]) -> Callable[[], object]:
    """The step captured as a CUDA graph: one launch instead of a Python call per kernel."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # cuBLAS settles its kernels and workspace before capture
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def time_decode(model: Any, plan: Plan, layer_class: type, batch: int, context: int) -> float:
    import torch

    cache = random_cache(plan, layer_class, batch, context)
    ids = torch.randint(plan.shape.vocab, (batch, 1), device=plan.device)

    def step() -> object:
        return model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)

    with torch.inference_mode():
        return median_seconds(graphed(step) if plan.graphs else step, plan)


def time_prefill(model: Any, plan: Plan, batch: int) -> float:
    """Eager: a prefill step is long enough on the GPU that Python's dispatching hides."""
    import torch

    ids = torch.randint(plan.shape.vocab, (batch, plan.prefill_tokens), device=plan.device)

    def step() -> object:
        return model(input_ids=ids, use_cache=False, logits_to_keep=1)

    with torch.inference_mode():
        return median_seconds(step, plan)


def fits(plan: Plan, batch: int, context: int) -> tuple[bool, str]:
    if plan.device != "cuda":
        return True, ""
    import torch

    free, _ = torch.cuda.mem_get_info()
    dtype_bytes = torch.empty((), dtype=getattr(torch, plan.dtype_name)).element_size()
    need = batch * (context + 1) * plan.shape.kv_bytes_per_token(dtype_bytes) + ACTIVATION_BYTES
    if need > MEMORY_SHARE * free:
        return False, f"needs {need / 1e9:.1f} GB of {free / 1e9:.1f} GB free"
    return True, ""


def release(plan: Plan) -> None:
    if plan.device == "cuda":
        import torch

        torch.cuda.empty_cache()


def over_budget(plan: Plan, progress: Progress) -> bool:
    return time.perf_counter() - progress.started > plan.budget_s


def skip(progress: Progress, phase: str, batch: int, context: int, why: str) -> None:
    log(f"skip {phase} batch={batch} context={context}: {why}")
    progress.skipped.append({"phase": phase, "batch": batch, "context": context, "why": why})


def decode_timing(
    model: Any, plan: Plan, progress: Progress, layer_class: type, batch: int, context: int
) -> StepTiming | None:
    """One decode point, or None when it is skipped (memory, time, a failed capture)."""
    ok, why = fits(plan, batch, context)
    if not ok:
        skip(progress, "decode", batch, context, why)
        return None
    graphs = progress.graphs
    try:
        seconds = time_decode(
            model, dataclasses.replace(plan, graphs=graphs), layer_class, batch, context
        )
    except RuntimeError as error:  # a capture that failed, or memory that ran out after all
        release(plan)
        if graphs and progress.graphed_points == 0:
            # The first capture failing says the step cannot be graphed at all: the table must
            # not mix graphed and eager points, so every point goes eager.
            log(f"CUDA graph capture failed ({error}); timing eagerly instead")
            progress.graphs = False
            return decode_timing(model, plan, progress, layer_class, batch, context)
        skip(progress, "decode", batch, context, str(error)[:200])
        return None
    release(plan)
    progress.graphed_points += int(graphs)
    log(f"decode batch={batch:>2} context={context:>5}: {seconds * 1e3:8.2f} ms")
    return StepTiming(batch, context, seconds)


def measure(model: Any, plan: Plan, progress: Progress) -> list[StepTiming]:
    layer_class = fixed_layer_class()
    check_cache(model, plan, layer_class)
    release(plan)
    timings: list[StepTiming] = []
    for context in plan.contexts:
        for batch in plan.batches:
            if over_budget(plan, progress):
                skip(progress, "decode", batch, context, "time budget spent")
                continue
            timing = decode_timing(model, plan, progress, layer_class, batch, context)
            if timing is not None:
                timings.append(timing)
    for batch in plan.prefill_batches:
        if over_budget(plan, progress):
            skip(progress, "prefill", batch, plan.prefill_tokens, "time budget spent")
            continue
        try:
            seconds = time_prefill(model, plan, batch)
        except RuntimeError as error:  # out of memory: the decode points still stand
            release(plan)
            skip(progress, "prefill", batch, plan.prefill_tokens, str(error)[:200])
            continue
        release(plan)
        log(f"prefill batch={batch} tokens={plan.prefill_tokens}: {seconds * 1e3:8.2f} ms")
        timings.append(StepTiming(batch, plan.prefill_tokens, seconds, prefill=True))
    return timings


def preset_for(plan: Plan, device_name: str, args: argparse.Namespace) -> ReplicaPreset:
    """The simulator's 8B preset on this GPU. The smoke test's tiny model gets a preset of its
    own sizes, with rough figures for a CPU's peaks: its fit only has to come out."""
    if not plan.smoke:
        return gpu_preset(device_name, args.hbm_gbps, args.tflops)
    params = plan.shape.params
    tiny = dataclasses.replace(
        H100_8B,
        model="tiny-llama",
        params=float(params),
        weight_bytes=4.0 * params,  # float32
        kv_bytes_per_token=plan.shape.kv_bytes_per_token(4),
    )
    return gpu_preset(device_name, args.hbm_gbps or 20.0, args.tflops or 0.2, base=tiny)


def table(calibration: Calibration) -> list[str]:
    lines = ["phase    batch  context  measured ms  predicted ms  ratio  fitted ms"]
    for row in calibration.rows:
        timing = row.timing
        lines.append(
            f"{'prefill' if timing.prefill else 'decode':<7} {timing.batch:>6} "
            f"{timing.context:>8} {timing.seconds * 1e3:>12.2f} {row.predicted_s * 1e3:>13.2f} "
            f"{row.ratio:>6.2f} {row.fitted_s * 1e3:>10.2f}"
        )
    return lines


def summary(calibration: Calibration) -> list[str]:
    preset, fitted = calibration.preset, calibration.fitted
    decode = sum(not row.timing.prefill for row in calibration.rows)
    prefill = len(calibration.rows) - decode
    flops = (
        f"flops_efficiency: {preset.flops_efficiency:.2f} -> {fitted.flops_efficiency:.3f} "
        f"(fitted on {prefill} prefill steps)"
        if calibration.flops_fitted
        else f"flops_efficiency: {preset.flops_efficiency:.2f} (no prefill steps: not fitted)"
    )
    return [
        f"bandwidth_efficiency: {preset.bandwidth_efficiency:.2f} -> "
        f"{fitted.bandwidth_efficiency:.3f} (fitted on {decode} decode steps)",
        flops,
        "ratio = measured / predicted with the current factors; fitted ms uses the fitted ones",
    ]


def result_json(
    calibration: Calibration, plan: Plan, progress: Progress, device_name: str, versions: str
) -> dict[str, Any]:
    preset, fitted = calibration.preset, calibration.fitted
    return {
        "bench": NAME,
        "device": device_name,
        "preset": preset.name,
        "hbm_gbps": round(preset.hbm_bytes_per_s / 1e9, 1),
        "peak_tflops": round(preset.peak_flops / 1e12, 1),
        "timing": "cuda-graph" if progress.graphs else "eager",
        "versions": versions,
        "bandwidth_efficiency": {
            "current": preset.bandwidth_efficiency,
            "fitted": round(fitted.bandwidth_efficiency, 4),
        },
        "flops_efficiency": {
            "current": preset.flops_efficiency,
            "fitted": round(fitted.flops_efficiency, 4) if calibration.flops_fitted else None,
        },
        "points": [
            {
                "phase": "prefill" if row.timing.prefill else "decode",
                "batch": row.timing.batch,
                "context": row.timing.context,
                "measured_ms": round(row.timing.seconds * 1e3, 3),
                "predicted_ms": round(row.predicted_s * 1e3, 3),
                "ratio": round(row.ratio, 3),
                "fitted_ms": round(row.fitted_s * 1e3, 3),
            }
            for row in calibration.rows
        ],
        "skipped": progress.skipped,
        "wall_s": round(time.perf_counter() - progress.started, 1),
    }


def report(
    calibration: Calibration, plan: Plan, progress: Progress, device_name: str, versions: str
) -> str:
    preset = calibration.preset
    timing = "CUDA graphs" if progress.graphs else "eager PyTorch calls"
    head = (
        f"{NAME}: decode steps of a random {preset.model} shape ({plan.dtype_name}, {timing}) "
        f"on {device_name}, median of {plan.repeats}, against step_seconds for {preset.name} "
        f"({preset.hbm_bytes_per_s / 1e9:,.0f} GB/s, {preset.peak_flops / 1e12:g} TFLOPS); "
        f"{versions}"
    )
    skipped = [f"skipped: {point}" for point in progress.skipped]
    data = result_json(calibration, plan, progress, device_name, versions)
    return "\n".join([head, *table(calibration), *summary(calibration), *skipped, json.dumps(data)])


def load_torch() -> Any | None:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as error:
        log(f"needs torch and transformers ({error}); try .vllm/venv/bin/python")
        return None
    return torch


def device_name(torch: Any, plan: Plan) -> str | None:
    if plan.smoke:
        return f"CPU ({platform.machine()})"
    if not torch.cuda.is_available():
        log("no CUDA GPU here: this benchmark times one (--cpu-smoke checks the code on a CPU)")
        return None
    return str(torch.cuda.get_device_name())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="a tiny model on the CPU")
    parser.add_argument("--hbm-gbps", type=float, help="the GPU's HBM bandwidth, GB/s")
    parser.add_argument("--tflops", type=float, help="the GPU's dense BF16 peak, TFLOPS")
    parser.add_argument("--eager", action="store_true", help="no CUDA graphs")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--budget-s", type=float, default=420.0, help="stop measuring after")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    args = parse_args(argv)
    plan = plan_for(args)
    torch = load_torch()
    name = device_name(torch, plan) if torch is not None else None
    if torch is None or name is None:
        return NO_GPU
    try:
        preset = preset_for(plan, name, args)
    except ValueError as error:  # a GPU the table does not know, and no figures for it
        log(str(error))
        return NO_GPU
    if plan.smoke:
        torch.set_num_threads(1)  # a check, not a measurement: leave the other cores alone
    torch.manual_seed(1)
    import transformers

    versions = f"torch {torch.__version__}, transformers {transformers.__version__}"
    model = build_model(plan)
    built = sum(parameter.numel() for parameter in model.parameters())
    log(f"built {plan.shape} on {name}: {built:,} parameters, {preset.params:,.0f} in the preset")
    progress = Progress(started, plan.graphs)
    try:
        calibration = calibrate(preset, measure(model, plan, progress))
    except (CacheMismatch, ValueError) as error:  # better no table than a wrong one
        log(str(error))  # a ValueError: every decode point was skipped, see above
        return 1
    text = report(calibration, plan, progress, name, versions)
    if plan.smoke:
        print(text)  # a CPU's figures are no calibration: bench/results keeps the GPU's
    else:
        publish(NAME, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
