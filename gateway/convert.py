"""Protobuf <-> domain values for ChatService."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from google.protobuf import timestamp_pb2

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2
from domain.errors import InvalidArgument
from domain.feedback import Rating
from domain.types import Finish
from gateway.completions import CallerTurn, CompleteRequest
from gateway.runs import (
    ApprovalRequested,
    Delta,
    Done,
    Event,
    Failed,
    Meta,
    Retract,
    ToolEnded,
    ToolsListed,
    ToolStarted,
)
from gateway.tool_requests import PlatformTool
from infra.convert import (
    AUTO_MODEL,
    FINISH_TO_PB,
    MODEL_CHOICES,
    RATING_FROM_PB,
    ROLE_FROM_PB,
    ROLE_TO_PB,
    options_from_pb,
    tool_call_from_pb,
    tool_call_to_pb,
    tool_definition_to_pb,
    usage_to_pb,
)
from store.records import ConversationRecord, MessageRecord

if TYPE_CHECKING:
    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

# The stream messages that carry a batch of events.
R = TypeVar("R", pb.SendMessageResponse, pb.AttachMessageResponse, pb.CompleteResponse)

# A model named by its pool runs there; "auto" (or none) lets the router choose.
POOL_OF_CHOICE = {choice: name for name, choice in MODEL_CHOICES.items() if name != AUTO_MODEL}
ROUTED_CHOICES = (pb.MODEL_CHOICE_UNSPECIFIED, MODEL_CHOICES[AUTO_MODEL])


def pool_of(choice: pb.ModelChoice) -> str | None:
    """The pool a caller asked for; None lets the router decide."""
    if choice not in ROUTED_CHOICES and choice not in POOL_OF_CHOICE:
        raise InvalidArgument("model must be auto, small or large")
    return POOL_OF_CHOICE.get(choice)


def rating_from_pb(rating: pb.Rating) -> Rating:
    found = RATING_FROM_PB.get(rating)
    if found is None:
        raise InvalidArgument("rating must be up or down")
    return found


def completion_from_pb(request: pb.CompleteRequest) -> CompleteRequest:
    turns = []
    for index, turn in enumerate(request.turns):
        role = ROLE_FROM_PB.get(turn.role)
        if role is None:
            raise InvalidArgument(f"turn {index} must be a system, user, assistant or tool turn")
        calls = tuple(tool_call_from_pb(call) for call in turn.tool_calls)
        turns.append(CallerTurn(role, turn.content, calls, turn.tool_call_id))
    return CompleteRequest(
        turns=tuple(turns),
        pool=pool_of(request.model),
        max_tokens=request.max_tokens,
        session_key=request.session_key,
        options=options_from_pb(request.options),
        resumable=request.resumable,
    )


def platform_tools_from_pb(
    request: pb.CompleteRequest | pb.SendMessageRequest,
) -> list[PlatformTool]:
    return [
        PlatformTool(
            server_label=tool.server_label,
            server_url=tool.server_url,
            headers=tuple(sorted(tool.headers.items())),
            allowed_tools=tuple(tool.allowed_tools),
            name=tool.name,
            require_approval=tool.require_approval,
            approval_exceptions=tuple(tool.approval_exceptions),
        )
        for tool in request.platform_tools
    ]


def tool_approvals_from_pb(request: pb.CompleteRequest) -> dict[str, bool]:
    approvals: dict[str, bool] = {}
    for approval in request.tool_approvals:
        if approval.call_id in approvals:
            raise InvalidArgument(f"call {approval.call_id[:80]!r} is decided twice")
        approvals[approval.call_id] = approval.approve
    return approvals


def timestamp_pb(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def event_to_pb(event_id: int, event: Event) -> pb.ChatEvent:
    match event:
        case Meta():
            return pb.ChatEvent(
                event_id=event_id,
                meta=pb.MetaEvent(
                    message_id=event.message_id,
                    conversation_id=event.conversation_id,
                    model=event.model,
                    replica_id=event.replica_id,
                    region=event.region,
                    region_notice=event.region_notice,
                    version=event.version,
                    downgraded=event.downgraded,
                    slice=event.slice,
                    pool=event.pool,
                    pool_reason=event.pool_reason,
                    platform_tools=event.tools,
                ),
            )
        case Delta():
            delta = pb.DeltaEvent(
                text=event.text,
                tool_calls=[tool_call_to_pb(call) for call in event.tool_calls],
                refusal=event.refusal,
            )
            return pb.ChatEvent(event_id=event_id, delta=delta)
        case Retract():
            retract = pb.RetractEvent(withdrawn_chars=event.chars)
            return pb.ChatEvent(event_id=event_id, retract=retract)
        case Done():
            done = pb.DoneEvent(finish=FINISH_TO_PB[event.finish], usage=usage_to_pb(event.usage))
            return pb.ChatEvent(event_id=event_id, done=done)
        case Failed():
            failed = pb.ErrorEvent(code=event.code, message=event.message)
            return pb.ChatEvent(event_id=event_id, error=failed)
        case ToolsListed():
            tools = [tool_definition_to_pb(tool) for tool in event.tools]
            listed = pb.ToolsListedEvent(server_label=event.server_label, tools=tools,
                                         error=event.error)  # fmt: skip
            return pb.ChatEvent(event_id=event_id, tools_listed=listed)
        case ToolStarted():
            call = pb.ToolCallEvent(call_id=event.call_id, server_label=event.server_label,
                                    name=event.name, arguments=event.arguments)  # fmt: skip
            return pb.ChatEvent(event_id=event_id, tool_call=call)
        case ApprovalRequested():
            asked = pb.ToolApprovalRequestEvent(
                call_id=event.call_id, server_label=event.server_label, name=event.name,
                arguments=event.arguments,
            )  # fmt: skip
            return pb.ChatEvent(event_id=event_id, approval_request=asked)
        case ToolEnded():
            result = pb.ToolResultEvent(call_id=event.call_id, output=event.output,
                                        error=event.error)  # fmt: skip
            return pb.ChatEvent(event_id=event_id, tool_result=result)


def events_response(response_type: type[R], batch: list[tuple[int, Event]]) -> R:
    """One stream message with a batch of events: the first in `event`, the others in
    `more`. Each is written in place: a message built apart and handed over would be built
    once and copied once, for every event of every answer."""
    response = response_type()
    (event_id, event), *rest = batch
    _fill(response.event, event_id, event)
    for event_id, event in rest:
        _fill(response.more.add(), event_id, event)
    return response


def add_events(
    target: RepeatedCompositeFieldContainer[pb.ChatEvent], batch: list[tuple[int, Event]]
) -> None:
    """A batch of events appended to a repeated field, each written in place."""
    for event_id, event in batch:
        _fill(target.add(), event_id, event)


def _fill(target: pb.ChatEvent, event_id: int, event: Event) -> None:
    if type(event) is Delta and not event.tool_calls and not event.refusal:  # nearly every one
        target.event_id = event_id
        target.delta.text = event.text
    else:
        target.MergeFrom(event_to_pb(event_id, event))


def conversation_to_pb(record: ConversationRecord) -> pb.Conversation:
    return pb.Conversation(
        conversation_id=record.conversation_id,
        title=record.title,
        model=record.model,
        total_tokens=record.total_tokens,
        created_at=timestamp_pb(record.created_at),
        updated_at=timestamp_pb(record.updated_at),
    )


def message_to_pb(record: MessageRecord, parent_id: str) -> pb.Message:
    return pb.Message(
        message_id=record.message_id,
        conversation_id=record.conversation_id,
        seq=record.seq,
        parent_id=parent_id,
        role=ROLE_TO_PB[record.role],
        content=record.content,
        tokens=record.tokens,
        model=record.model,
        replica_id=record.replica_id,
        finish=(
            FINISH_TO_PB.get(Finish(record.finish), common_pb2.FINISH_REASON_UNSPECIFIED)
            if record.finish
            else common_pb2.FINISH_REASON_UNSPECIFIED
        ),
        created_at=timestamp_pb(record.created_at),
        region=record.region,
    )
