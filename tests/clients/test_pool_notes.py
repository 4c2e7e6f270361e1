"""The pool that served, as the Python client reads it from the meta event and `chatctl chat`
says it: a pool other than the one asked for is named with why; auto's choice is not news."""

from __future__ import annotations

import argparse

import pytest

from chat.v1 import chat_service_pb2 as pb
from clients.chat_client import Meta, event_from_pb
from clients.chatctl.chat import ChatSession


def meta(reason: str) -> Meta:
    wire = pb.MetaEvent(message_id="m1", conversation_id="c1", model="llama-8b", replica_id="n0",
                        pool="small", pool_reason=reason)  # fmt: skip
    return event_from_pb(pb.ChatEvent(event_id=1, meta=wire))  # type: ignore[return-value]


def test_the_client_reads_the_pool_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    assert (meta("tier").pool, meta("tier").pool_reason) == ("small", "tier")
    args = argparse.Namespace(conversation="c1", json=False)
    session = ChatSession(None, args)  # type: ignore[arg-type]
    for reason in ("tier", "router", ""):
        session.show(meta(reason))
    _, err = capsys.readouterr()
    assert err == "[llama-8b on n0; the small pool: tier]\n[llama-8b on n0]\n[llama-8b on n0]\n"
