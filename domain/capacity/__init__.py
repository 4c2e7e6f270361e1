"""The capacity planner: size a GPU fleet from tokens, after the two reference sizings.

Preset 000 sizes from messages: traffic times the GPU-seconds one message costs (prefill of
the uncached prompt plus decode of the answer), for a 70B model with 8B routing. Preset 002 sizes
from KV-cache bytes: how many conversations fit in a node's free GPU memory, stretched by the TTL
duty cycle, against the peak concurrency that Little's law gives; then the lever table.

The calculation is pure (dataclasses in, dataclasses out): `inputs`, `messages` (sizing 000),
`sessions` (sizing 002 and its levers; both sizings: docs/ARCHITECTURE.md, "Reference sizing")
and `steps` (each result with its formula). It sits in domain/ because two callers share it:
`chatctl plan` (clients/chatctl/plan.py, arguments and stdout) and the fleet simulator, whose
scenarios' fleets are its output (fleet/scenarios.py). Every value stays unrounded until
it is printed: rounding an intermediate figure (nodes, say) is how two results of one derivation
stop reconciling.
"""

from domain.capacity.inputs import (
    MessageInputs,
    PlanInputError,
    SessionInputs,
    kv_bytes_per_token,
)
from domain.capacity.messages import MessagePlan, plan_messages, whole_replicas
from domain.capacity.sessions import (
    LeverRow,
    SessionPlan,
    lever_table,
    plan_sessions,
    size_sessions,
)
from domain.capacity.steps import MESSAGE_STEPS, SESSION_STEPS, Step, explain

__all__ = [
    "MESSAGE_STEPS",
    "SESSION_STEPS",
    "LeverRow",
    "MessageInputs",
    "MessagePlan",
    "PlanInputError",
    "SessionInputs",
    "SessionPlan",
    "Step",
    "explain",
    "kv_bytes_per_token",
    "lever_table",
    "plan_messages",
    "plan_sessions",
    "size_sessions",
    "whole_replicas",
]
