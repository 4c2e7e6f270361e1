"""`chatctl plan` on the command line: every input a flag, the plan as a table or JSON. The
calculation itself is domain/capacity/ (pure; the fleet simulator sizes its fleets with it)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import Field, asdict, fields
from typing import cast

from domain.capacity.inputs import MessageInputs, PlanInputError, SessionInputs, flag
from domain.capacity.messages import MessagePlan, plan_messages
from domain.capacity.sessions import LeverRow, SessionPlan, plan_sessions
from domain.capacity.steps import (
    MESSAGE_STEPS,
    SESSION_STEPS,
    Step,
    explain,
    number,
    with_unit,
)

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
    "region_gpu_cap": "GPUs one region can get: past it, more regions",
}


def _default_text(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:.4g}"


def _presets_with(name: str) -> list[str]:
    return [preset for preset, inputs in PRESETS.items() if name in _field_names(inputs)]


def _field_names(inputs: type[MessageInputs] | type[SessionInputs]) -> set[str]:
    return {item.name for item in fields(inputs)}


def _field(preset: str, name: str) -> Field:
    return next(item for item in fields(PRESETS[preset]) if item.name == name)


def _field_default(preset: str, name: str) -> float:
    # Every input of a preset has a number for its default (never MISSING).
    return cast(float, _field(preset, name).default)


def _is_integer(name: str) -> bool:
    # Annotations are strings here (postponed evaluation): layers and heads are counts.
    return _field(_presets_with(name)[0], name).type == "int"


def _spec_defaults(name: str) -> str:
    return "; ".join(
        f"{preset}: {_default_text(_field_default(preset, name))}" for preset in _presets_with(name)
    )


def add_plan_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `plan`; every input is a flag whose default is the chosen sizing's value."""
    parser = subparsers.add_parser(
        "plan",
        help="size a GPU fleet from tokens, step by step",
        description="Size a GPU fleet from tokens. --preset 000 sizes from messages and "
        "GPU-seconds, --preset 002 from KV-cache bytes. Unset flags take the preset's value.",
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="000", help="which sizing")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    shared = parser.add_argument_group("inputs of both presets")
    groups = {
        preset: parser.add_argument_group(f"inputs of --preset {preset} only") for preset in PRESETS
    }
    for name, text in FLAG_HELP.items():
        presets = _presets_with(name)
        group = shared if len(presets) > 1 else groups[presets[0]]
        group.add_argument(
            flag(name),
            dest=name,
            type=int if _is_integer(name) else float,
            default=None,
            metavar="N",
            help=f"{text} (sizing default {_spec_defaults(name)})",
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
            raise PlanInputError(f"{flag(name)} does not apply to --preset {args.preset}")
        overrides[name] = value
    return inputs(**overrides)


def _table(title: str, steps: list[Step]) -> list[str]:
    results = [with_unit(step.value, step.unit) for step in steps]
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
            f"{row.lever:<{width}}  {row.change:<{change_width}}"
            f"  {number(row.concurrent_per_gpu):>7}  {number(row.gpus):>8}"
            f"  {with_unit(row.dollars_per_year, '$'):>9}"
            f"  {with_unit(row.saving_per_year, '$'):>11}"
        )
    return lines


def render(inputs: MessageInputs | SessionInputs) -> tuple[str, dict[str, object]]:
    """The readable table and the JSON object for one set of inputs."""
    if isinstance(inputs, MessageInputs):
        plan: MessagePlan | SessionPlan = plan_messages(inputs)
        steps = explain(MESSAGE_STEPS, inputs, plan)
        lines = _table("sizing 000: fleet from messages and GPU-seconds", steps)
    else:
        plan = plan_sessions(inputs)
        steps = explain(SESSION_STEPS, inputs, plan)
        lines = _table("sizing 002: fleet from KV-cache bytes", steps)
        lines += _lever_lines(plan.levers)
    document: dict[str, object] = {
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
