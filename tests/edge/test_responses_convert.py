"""The Responses API's pure parts: OpenAI's event numbering over the platform's event ids, and
which request fields are honoured, accepted at their default, or refused."""

from __future__ import annotations

import pytest

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2
from edge.openai_api import OpenAIError
from edge.responses_convert import EventTranslator, ResponseState, first_sequence
from edge.responses_request import parse


def answer_events(*texts: str) -> list[pb.ChatEvent]:
    events = [pb.ChatEvent(event_id=1, meta=pb.MetaEvent(message_id="resp_1", model="m"))]
    for text in texts:
        events.append(pb.ChatEvent(event_id=len(events) + 1, delta=pb.DeltaEvent(text=text)))
    usage = common_pb2.Usage(input_tokens=9, cached_tokens=4, output_tokens=len(texts))
    done = pb.DoneEvent(finish=common_pb2.FINISH_REASON_STOP, usage=usage)
    events.append(pb.ChatEvent(event_id=len(events) + 1, done=done))
    return events


def translated(events: list[pb.ChatEvent]) -> list[tuple[int, str, dict]]:
    translator = EventTranslator(ResponseState("resp_1", "auto"))
    return [out for event in events for out in translator.feed(event)]


def test_openai_numbers_count_from_0_without_gaps_and_follow_from_the_event_ids() -> None:
    out = translated(answer_events("A", " b", "."))
    assert [seq for seq, _, _ in out] == list(range(11))
    assert [name for _, name, _ in out] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    # Each platform event's first OpenAI number is computed from its id alone.
    assert [first_sequence(i) for i in (1, 2, 3, 4, 5)] == [0, 4, 5, 6, 7]
    ending = out[-1][2]["response"]
    assert (ending["status"], ending["model"], ending["output"][0]["content"][0]["text"]) == (
        "completed", "m", "A b.")  # fmt: skip
    assert ending["usage"]["input_tokens_details"] == {"cached_tokens": 4}
    assert ending["usage"]["total_tokens"] == 12


def test_a_resume_after_n_is_the_tail_of_the_same_events() -> None:
    whole = translated(answer_events("One", " two", " three", "."))
    for after in range(len(whole)):
        assert [e for e in whole if e[0] > after] == whole[after + 1 :]


@pytest.mark.parametrize(
    ("finish", "status", "reason"),
    [
        (common_pb2.FINISH_REASON_LENGTH, "incomplete", "max_output_tokens"),
        (common_pb2.FINISH_REASON_REFUSED, "incomplete", "content_filter"),
        (common_pb2.FINISH_REASON_CANCELLED, "cancelled", None),
        (common_pb2.FINISH_REASON_ERROR, "failed", None),
    ],
)
def test_each_finish_ends_the_response_as_openai_names_it(finish, status, reason) -> None:
    events = answer_events("Hi")
    events[-1].done.finish = finish
    name, payload = translated(events)[-1][1:]
    assert (name, payload["response"]["status"]) == (f"response.{status}", status)
    details = payload["response"]["incomplete_details"]
    assert (details["reason"] if details else None) == reason


def test_fields_at_their_default_are_accepted_and_others_refused_by_name() -> None:
    accepted = parse(
        {
            "model": "small",
            "input": [
                {"role": "developer", "content": "Be brief."},
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "Hi"}],
                },
            ],
            "instructions": "Answer in French.",
            "temperature": 1,
            "top_p": None,
            "tools": [],
            "tool_choice": "auto",
            "metadata": {},
            "truncation": "auto",
            "user": "someone",
        }
    )
    assert (accepted.model, accepted.content, accepted.system) == (
        "small", "Hi", "Answer in French.\n\nBe brief.")  # fmt: skip
    refusals = [
        ("temperature", 0.5),
        ("truncation", "disabled"),
        ("reasoning", {"effort": "high"}),
        ("n", 1),
    ]
    for field, value in refusals:
        with pytest.raises(OpenAIError) as refused:
            parse({"input": "Hi", field: value})
        assert (refused.value.status, refused.value.param) == (400, field)
    with pytest.raises(OpenAIError) as unknown_model:
        parse({"model": "gpt-4o", "input": "Hi"})
    assert (unknown_model.value.status, unknown_model.value.code) == (404, "model_not_found")
