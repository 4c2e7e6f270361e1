"""The OpenAI Responses API's objects and stream events, made from the platform's answer events
and stored messages, and the ChatService requests it sends. Pure conversion: no I/O.

Event numbers. OpenAI numbers a response's stream events from 0 (`sequence_number`); the
platform numbers an answer's events from 1 (`event_id`). Each platform event becomes a fixed
run of OpenAI events at a fixed place, so one is computed from the other:

  meta  (id 1)       -> 0 response.created, 1 response.in_progress,
                        2 response.output_item.added, 3 response.content_part.added
  delta (id k)       -> k + 2 response.output_text.delta
  done  (id d, last) -> d + 2 response.output_text.done, d + 3 response.content_part.done,
                        d + 4 response.output_item.done, d + 5 the ending (response.completed,
                        response.incomplete, response.cancelled or response.failed)
  error (id e, last) -> e + 2 response.failed

A resume after sequence number N replays the answer's log from its start (it is kept whole
while the answer runs and a while after) and writes only the events numbered above N: the
final events carry the whole text, so the text before N is needed anyway."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2
from edge.failures import user_message_of_code
from infra.convert import FINISH_NAMES, MODEL_CHOICES

RESPONSE_PREFIX = "resp_"
ITEM_PREFIX = "msg_"
ANSWER_SUFFIX = ".answer"
# The events one meta event becomes, and so where the first delta's number starts.
META_EVENTS = 4
# A response's status by its answer's finish (the domain's names); a refusal by the safety
# checks is OpenAI's content filter.
STATUS_OF_FINISH = {
    "stop": "completed",
    "length": "incomplete",
    "cancelled": "cancelled",
    "refused": "incomplete",
    "error": "failed",
}
INCOMPLETE_REASON = {
    "length": "max_output_tokens",
    "refused": "content_filter",
}
ENDING_EVENT = {
    "completed": "response.completed",
    "incomplete": "response.incomplete",
    "cancelled": "response.cancelled",
    "failed": "response.failed",
}


def first_sequence(event_id: int) -> int:
    """The sequence number of the first OpenAI event platform event event_id becomes."""
    return 0 if event_id <= 1 else event_id + META_EVENTS - 2


def item_id(response_id: str) -> str:
    return ITEM_PREFIX + response_id.removeprefix(RESPONSE_PREFIX)


@dataclass(slots=True)
class ResponseState:
    """What is known of one response; `body` writes it as OpenAI's Response object."""

    response_id: str
    model: str
    created_at: float = field(default_factory=time.time)
    instructions: str | None = None
    previous_response_id: str | None = None
    background: bool = False
    store: bool = True
    max_output_tokens: int | None = None
    status: str = "in_progress"
    text: str = ""
    usage: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    incomplete_reason: str | None = None
    # A response with platform tools (edge/responses_tools.py): the tools as the request gave
    # them, and the output items of their listings and calls, before the message.
    tools: list[dict[str, Any]] = field(default_factory=list)
    parallel_tool_calls: bool = False
    tool_items: list[dict[str, Any]] = field(default_factory=list)
    message_opened: bool = False
    # The answer is the platform's tool loop (its meta event says so): tool items come first.
    tool_loop: bool = False
    # The answer ended on calls that wait for a person's approval (no message follows).
    awaiting_approval: bool = False
    # As the request gave it (OpenAI echoes it): "auto", "required", or a function named.
    tool_choice: Any = "auto"
    # The request gave functions the caller runs; the model called some (the caller runs
    # them and sends their outputs in the next request: no message follows).
    functions: bool = False
    functions_called: bool = False

    def item(self, status: str) -> dict[str, Any]:
        content = [self.part()] if status != "in_progress" or self.text else []
        return {
            "id": item_id(self.response_id),
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def part(self) -> dict[str, Any]:
        return {"type": "output_text", "text": self.text, "annotations": [], "logprobs": []}

    def item_status(self) -> str:
        """The output message's status: OpenAI's item statuses are in_progress, completed
        and incomplete (a cut answer: too long, refused, cancelled or failed)."""
        return self.status if self.status in ("in_progress", "completed") else "incomplete"

    def output(self) -> list[dict[str, Any]]:
        if not self.text and self.status in ("in_progress", "failed"):
            return list(self.tool_items)
        if self.tool_loop and not self.message_opened and not self.text:
            return list(self.tool_items)
        if (self.awaiting_approval or self.functions_called) and not self.text:
            return list(self.tool_items)
        return [*self.tool_items, self.item(self.item_status())]

    def body(self) -> dict[str, Any]:
        incomplete = {"reason": self.incomplete_reason} if self.incomplete_reason else None
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": int(self.created_at),
            "status": self.status,
            "background": self.background,
            "error": self.error,
            "incomplete_details": incomplete,
            "instructions": self.instructions,
            "max_output_tokens": self.max_output_tokens,
            "model": self.model,
            "output": self.output(),
            "parallel_tool_calls": self.parallel_tool_calls,
            "previous_response_id": self.previous_response_id,
            "reasoning": {"effort": None, "summary": None},
            "store": self.store,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": self.tool_choice if self.tools else "none",
            "tools": self.tools,
            "top_p": 1.0,
            "truncation": "auto",
            "usage": self.usage,
            "metadata": {},
        }


def usage_json(usage: common_pb2.Usage) -> dict[str, Any]:
    return {
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    }


Event = tuple[int, str, dict[str, Any]]


class EventTranslator:
    """Turns one answer's platform events, in order from the first, into OpenAI's stream
    events, each with its sequence number, while keeping the response's state."""

    def __init__(self, state: ResponseState) -> None:
        self.state = state

    def feed(self, event: pb.ChatEvent) -> list[Event]:
        kind = event.WhichOneof("kind")
        seq = first_sequence(int(event.event_id))
        if kind == "meta":
            if event.meta.model:
                self.state.model = event.meta.model
            return self._opening(seq)
        if kind == "delta":
            self.state.text += event.delta.text
            return [(seq, "response.output_text.delta", self._text_event(delta=event.delta.text))]
        if kind == "retract":
            # Responses are held back (SendMessageRequest.hold_back), so none comes; were one
            # to, the text it withdraws is not part of the answer.
            self.state.text = ""
            return []
        if kind == "done":
            return self._closing(seq, event.done)
        if kind == "error":
            self.state.status = "failed"
            message = user_message_of_code(event.error.code, event.error.message)
            self.state.error = {"code": "server_error", "message": message}
            return [(seq, "response.failed", {"response": self.state.body()})]
        return []

    def _text_event(self, **extra: Any) -> dict[str, Any]:
        return {
            "item_id": item_id(self.state.response_id),
            "output_index": 0,
            "content_index": 0,
            **extra,
            "logprobs": [],
        }

    def _opening(self, seq: int) -> list[Event]:
        body = self.state.body()
        return [
            (seq, "response.created", {"response": body}),
            (seq + 1, "response.in_progress", {"response": body}),
            (seq + 2, "response.output_item.added",
             {"output_index": 0, "item": self.state.item("in_progress")}),
            (seq + 3, "response.content_part.added",
             {"item_id": item_id(self.state.response_id), "output_index": 0,
              "content_index": 0, "part": {**self.state.part(), "text": ""}}),
        ]  # fmt: skip

    def _closing(self, seq: int, done: pb.DoneEvent) -> list[Event]:
        finish(self.state, done)
        status = self.state.status
        part = self.state.part()
        text_done = self._text_event(text=self.state.text)
        return [
            (seq, "response.output_text.done", text_done),
            (seq + 1, "response.content_part.done",
             {"item_id": item_id(self.state.response_id), "output_index": 0,
              "content_index": 0, "part": part}),
            (seq + 2, "response.output_item.done",
             {"output_index": 0, "item": self.state.item(self.state.item_status())}),
            (seq + 3, ENDING_EVENT[status], {"response": self.state.body()}),
        ]  # fmt: skip


def finish(state: ResponseState, done: pb.DoneEvent) -> None:
    """The response's ending from the answer's `done` event."""
    end(state, FINISH_NAMES.get(done.finish, "stop"))
    state.usage = usage_json(done.usage)


def end(state: ResponseState, finish_name: str) -> None:
    state.status = STATUS_OF_FINISH.get(finish_name, "completed")
    state.incomplete_reason = INCOMPLETE_REASON.get(finish_name)
    if state.status == "failed":
        state.error = {"code": "server_error", "message": "the model failed while answering"}


def stored_state(reply: pb.GetResponseResponse, background: bool = False) -> ResponseState:
    """A response read back from the store. The store keeps each turn's own token count, not
    the prompt's, so usage is null; instructions are not stored, so they read null too."""
    question = reply.question
    parent = question.parent_id
    previous = parent.removesuffix(ANSWER_SUFFIX) if parent.startswith(RESPONSE_PREFIX) else None
    state = ResponseState(
        response_id=question.message_id,
        model=question.model,
        created_at=question.created_at.ToSeconds(),
        previous_response_id=previous,
        background=background,
    )
    if not reply.answered:
        return state
    answer = reply.answer
    state.model = answer.model or state.model
    state.text = answer.content
    end(state, FINISH_NAMES.get(answer.finish, "stop"))
    return state


def sse_line(event: Event) -> bytes:
    """One OpenAI stream event on the wire: `event:` its type, `data:` the JSON with `type`
    and `sequence_number` in it (the SDK reads those), and the number as the SSE id too."""
    seq, name, payload = event
    data = json.dumps({"type": name, "sequence_number": seq, **payload},
                      separators=(",", ":"), ensure_ascii=False)  # fmt: skip
    return f"id: {seq}\nevent: {name}\ndata: {data}\n\n".encode()


def send_request(
    conversation_id: str,
    response_id: str,
    parent_id: str,
    content: str,
    model: str,
    instructions: str,
    max_tokens: int,
    tools: list[pb.PlatformTool] | None = None,
) -> pb.SendMessageRequest:
    """A stored response's message; model: one of MODEL_CHOICES."""
    return pb.SendMessageRequest(
        conversation_id=conversation_id,
        message_id=response_id,
        parent_id=parent_id,
        content=content,
        model=MODEL_CHOICES[model],
        instructions=instructions,
        # An OpenAI client has no way to withdraw text it was shown.
        hold_back=True,
        max_tokens=max_tokens,
        platform_tools=tools or [],
    )


def get_request(response_id: str) -> pb.GetResponseRequest:
    return pb.GetResponseRequest(response_id=response_id)


def delete_request(response_id: str) -> pb.DeleteResponseRequest:
    return pb.DeleteResponseRequest(response_id=response_id)


def failure_event(after_event_id: int, code: int, message: str) -> pb.ChatEvent:
    """The answer's end when its stream broke with an error: an error event after the last."""
    return pb.ChatEvent(
        event_id=after_event_id + 1, error=pb.ErrorEvent(code=code, message=message)
    )
