"""Protobuf <-> domain values for SchedulerService."""

from __future__ import annotations

import math
from collections.abc import Callable

from google.protobuf import timestamp_pb2

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from domain import rollout
from domain.errors import InvalidArgument
from domain.ladder import LadderState
from domain.picker import PickReason, ReplicaLoad
from domain.types import NodeState, Tier
from infra.convert import TIER_FROM_PB, TIER_TO_PB, tool_definition_to_pb, turn_to_pb
from infra.rollout_convert import gate_from_pb
from scheduler.membership import NodeRecord
from scheduler.table import NodeEntry
from store.records import CapturedPrompt, MemoryRecord, UserRecord

RolloutEdit = Callable[[rollout.RolloutState, float], rollout.RolloutState]

STATE_FROM_PB = {
    pb.NODE_STATE_STARTING: NodeState.STARTING,
    pb.NODE_STATE_READY: NodeState.READY,
    pb.NODE_STATE_DRAINING: NodeState.DRAINING,
    pb.NODE_STATE_DEAD: NodeState.DEAD,
}
STATE_TO_PB = {v: k for k, v in STATE_FROM_PB.items()}
REASON_TO_PB = {
    PickReason.AFFINITY: pb.PICK_REASON_AFFINITY,
    PickReason.ESCAPED_QUEUE: pb.PICK_REASON_ESCAPED_QUEUE,
    PickReason.ESCAPED_KV_ROOM: pb.PICK_REASON_ESCAPED_KV_ROOM,
    PickReason.NO_REPLICA: pb.PICK_REASON_NO_REPLICA,
    PickReason.MOVED: pb.PICK_REASON_MOVED,
    PickReason.COLD: pb.PICK_REASON_COLD,
}


def load_fields(report: pb.LoadReport) -> dict[str, object]:
    """A load report as LoadTable.report's keyword arguments."""
    return {
        "kv_usage": report.kv_usage,
        "free_kv_tokens": report.free_kv_tokens,
        "queued_prefill_tokens": report.queued_prefill_tokens,
        "running_requests": report.running_requests,
        "waiting_requests": report.waiting_requests,
        "prefix_hit_rate": report.prefix_hit_rate,
        "state": STATE_FROM_PB.get(report.state, NodeState.STARTING),
        # Not a number, or below 0, reads as not measured: the configured speed counts.
        "prefill_tokens_per_s": _measured(report.prefill_tokens_per_second),
        "decode_step_s": _measured(report.decode_step_seconds),
        "answer_s": _measured(report.answer_seconds),
    }


def _measured(value: float) -> float:
    return value if math.isfinite(value) and value > 0 else 0.0


def registration_to_load(reg: pb.NodeRegistration) -> ReplicaLoad:
    if not reg.node_id or not reg.address or not reg.pool:
        raise InvalidArgument("a registration needs node_id, address and pool")
    return ReplicaLoad(
        node_id=reg.node_id,
        address=reg.address,
        pool=reg.pool,
        model=reg.model,
        state=NodeState.STARTING,
        free_kv_tokens=reg.kv_capacity_tokens,
        queued_prefill_tokens=0,
        max_running_requests=reg.max_running_requests,
    )


def registration_to_record(reg: pb.NodeRegistration) -> NodeRecord:
    return NodeRecord(
        reg.node_id, reg.address, reg.pool, reg.model, reg.context_tokens, reg.kv_capacity_tokens
    )


def command_to_pb(drain: bool) -> pb.ConnectNodeResponse:
    command = pb.NODE_COMMAND_DRAIN if drain else pb.NODE_COMMAND_UNDRAIN
    return pb.ConnectNodeResponse(command=command)


def tier_from_pb(value: common_pb2.Tier) -> Tier:
    if value not in TIER_FROM_PB:
        raise InvalidArgument("tier must be TIER_FREE or TIER_PLUS")
    return TIER_FROM_PB[value]


def paid(tier: common_pb2.Tier) -> bool:
    """Whether a pick is for a paying user; unset counts as Free (the longer wait)."""
    return TIER_FROM_PB.get(tier) is Tier.PLUS


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def user_to_pb(user: UserRecord, home: str = "", pinned: bool = False) -> pb.User:
    return pb.User(
        user_id=user.user_id,
        tier=TIER_TO_PB[user.tier],
        created_at=timestamp(user.created_at),
        has_token=user.has_token,
        home_region=home,
        pinned=pinned,
    )


def memory_to_pb(memory: MemoryRecord) -> pb.UserMemory:
    return pb.UserMemory(memory_id=memory.memory_id, text=memory.text, pinned=memory.pinned,
                         source=memory.source, created_at=timestamp(memory.created_at),
                         updated_at=timestamp(memory.updated_at))  # fmt: skip


def pick_to_pb(
    replica: ReplicaLoad,
    reason: PickReason,
    expected_wait_s: float,
    ladder_rung: int,
    context_tokens: int,
) -> pb.PickReplicaResponse:
    return pb.PickReplicaResponse(
        node_id=replica.node_id,
        address=replica.address,
        reason=REASON_TO_PB[reason],
        expected_wait_seconds=expected_wait_s,
        ladder_rung=ladder_rung,
        model=replica.model,
        context_tokens=context_tokens,
    )


def node_status_to_pb(node_id: str, entry: NodeEntry, last_report_at: float) -> pb.NodeStatus:
    """last_report_at: wall-clock seconds."""
    load = entry.load
    return pb.NodeStatus(
        registration=pb.NodeRegistration(
            node_id=node_id,
            address=load.address,
            model=load.model,
            pool=load.pool,
            context_tokens=entry.context_tokens,
            kv_capacity_tokens=entry.kv_capacity_tokens,
        ),
        load=pb.LoadReport(
            kv_usage=load.kv_usage,
            free_kv_tokens=load.free_kv_tokens,
            queued_prefill_tokens=load.queued_prefill_tokens,
            running_requests=load.running_requests,
            waiting_requests=load.waiting_requests,
            prefix_hit_rate=load.prefix_hit_rate,
            state=STATE_TO_PB[load.state],
            prefill_tokens_per_second=load.prefill_tokens_per_s,
            decode_step_seconds=load.decode_step_s,
            answer_seconds=load.answer_s,
        ),
        last_report_at=timestamp(last_report_at),
    )


def ladder_to_pb(state: LadderState, leading: bool) -> pb.GetLadderResponse:
    history = [
        pb.LadderChange(
            at=timestamp(c.at),
            from_rung=c.from_rung,
            to_rung=c.to_rung,
            busy_share=c.busy_share,
            reason=c.reason,
        )
        for c in state.history
    ]
    return pb.GetLadderResponse(
        rung=state.effective_rung,
        busy_share=state.busy_share,
        pinned=state.pinned is not None,
        history=history,
        leading=leading,
    )


def rollout_edit(request: pb.ChangeRolloutRequest) -> RolloutEdit:
    """The change a ChangeRollout asks for, as a function of the state and the time."""
    kind = request.WhichOneof("change")
    if kind == "split":
        c = request.split
        tier = tier_from_pb(c.tier)
        return lambda s, at: rollout.split(s, c.version, tier, c.percent, at)
    if kind == "promote":
        p = request.promote
        return lambda s, at: rollout.promote(s, p.version, at, force=p.force)
    if kind == "rollback":
        reason = request.rollback.reason or "rolled back by an operator"
        return lambda s, at: rollout.rollback(s, at, reason)
    if kind == "holdout":
        return lambda s, at: rollout.move_holdout(s, request.holdout.version, at)
    if kind == "pin":
        pin = request.pin
        return lambda s, at: rollout.pin_user(s, pin.user_id, pin.version, at)
    if kind == "gate":
        g = request.gate
        return lambda s, at: rollout.record_gate(
            s, gate_from_pb(g.candidate, g.baseline, g.passed, at, g.summary, g.sizes)
        )
    raise InvalidArgument(
        "a rollout change names one of split, promote, rollback, holdout, pin, gate"
    )


def captured_prompt_to_pb(prompt: CapturedPrompt) -> pb.GetCapturedPromptResponse:
    return pb.GetCapturedPromptResponse(
        message_id=prompt.message_id,
        conversation_id=prompt.conversation_id,
        version=prompt.version,
        model=prompt.model,
        node_id=prompt.node_id,
        temperature=prompt.temperature,
        max_tokens=prompt.max_tokens,
        turns=[pb.CapturedTurn(turn=turn_to_pb(t), tokens=t.tokens) for t in prompt.turns],
        captured_at=timestamp(prompt.created_at),
        tools=[tool_definition_to_pb(tool) for tool in prompt.tools],
    )
