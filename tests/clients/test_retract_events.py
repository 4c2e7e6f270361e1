"""A `retract` from the gateway, as the Python client and `chatctl chat` present it."""

from __future__ import annotations

import argparse

import pytest

from chat.v1 import chat_service_pb2 as pb
from clients.chat_client import Delta, Retract, answer_text, event_from_pb
from clients.chatctl.chat import ChatSession

REFUSAL = "I can't continue this answer."


def test_a_retract_event_drops_the_answer_text_before_it() -> None:
    wire = [
        pb.ChatEvent(event_id=2, delta=pb.DeltaEvent(text="Here is ")),
        pb.ChatEvent(event_id=3, delta=pb.DeltaEvent(text="a start")),
        pb.ChatEvent(event_id=4, retract=pb.RetractEvent(withdrawn_chars=15)),
        pb.ChatEvent(event_id=5, delta=pb.DeltaEvent(text=REFUSAL)),
    ]
    events = [event_from_pb(event) for event in wire]
    assert events[2] == Retract(4, 15)
    assert events[3] == Delta(5, REFUSAL)
    assert answer_text(events) == REFUSAL
    assert answer_text(events[:2]) == "Here is a start"


def test_chatctl_says_the_text_shown_was_withdrawn(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(conversation="c1", json=False)
    session = ChatSession(None, args)  # type: ignore[arg-type]
    for event in (Delta(2, "Here is a start"), Retract(3, 15), Delta(4, REFUSAL)):
        session.show(event)
    out, err = capsys.readouterr()
    assert out == "Here is a start\n" + REFUSAL
    assert err == "[the text above was withdrawn: the output check flagged it]\n"


def test_chatctl_json_lists_the_retract_as_an_event(capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(conversation="c1", json=True)
    session = ChatSession(None, args)  # type: ignore[arg-type]
    session.show(Retract(3, 15))
    out, _ = capsys.readouterr()
    assert out == '{"event": "retract", "event_id": 3, "withdrawn_chars": 15}\n'
