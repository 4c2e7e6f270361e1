"""`chatctl plan`: size a GPU fleet from tokens, after the two sizing specifications.

Preset 000 sizes from messages: traffic times the GPU-seconds one message costs (prefill of
the uncached prompt plus decode of the answer), for a 70B model with 8B routing. Preset 002 sizes
from KV-cache bytes: how many conversations fit in a node's free GPU memory, stretched by the TTL
duty cycle, against the peak concurrency that Little's law gives; then the lever table.

The calculation is pure (dataclasses in, dataclasses out): `inputs`, `messages` (sizing 000),
`sessions` (sizing 002 and its levers; both sizings: docs/ARCHITECTURE.md, "Reference sizing")
and `steps` (each result with its formula). Only `cli` (`add_plan_parser`, `run_plan`) touches
arguments and stdout. Every value stays unrounded until
it is printed: rounding an intermediate figure (nodes, say) is how two results of one derivation
stop reconciling.
"""

from clients.chatctl.plan.cli import (
    FLAG_HELP,
    PRESETS,
    add_plan_parser,
    inputs_from_args,
    render,
    run_plan,
)
from clients.chatctl.plan.inputs import (
    MessageInputs,
    PlanInputError,
    SessionInputs,
    kv_bytes_per_token,
)
from clients.chatctl.plan.messages import MessagePlan, plan_messages, whole_replicas
from clients.chatctl.plan.sessions import (
    LeverRow,
    SessionPlan,
    lever_table,
    plan_sessions,
    size_sessions,
)
from clients.chatctl.plan.steps import MESSAGE_STEPS, SESSION_STEPS, Step, explain

__all__ = [
    "FLAG_HELP",
    "MESSAGE_STEPS",
    "PRESETS",
    "SESSION_STEPS",
    "LeverRow",
    "MessageInputs",
    "MessagePlan",
    "PlanInputError",
    "SessionInputs",
    "SessionPlan",
    "Step",
    "add_plan_parser",
    "explain",
    "inputs_from_args",
    "kv_bytes_per_token",
    "lever_table",
    "plan_messages",
    "plan_sessions",
    "render",
    "run_plan",
    "size_sessions",
    "whole_replicas",
]
