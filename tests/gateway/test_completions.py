"""The pure parts of stateless completions: validation, the affinity key, fitting."""

from __future__ import annotations

import asyncio

import pytest

from domain.errors import InvalidArgument, MessageTooLarge
from domain.types import Role, Turn
from gateway import completions
from gateway.completions import CallerTurn, CompleteRequest
from gateway.runs import Delta, MessageRun

SYSTEM = CallerTurn(Role.SYSTEM, "You are terse.")
HELLO = CallerTurn(Role.USER, "Hello")


def request(*turns: CallerTurn, session_key: str = "", max_tokens: int = 0) -> CompleteRequest:
    return CompleteRequest(tuple(turns), None, max_tokens, session_key)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (request(), "must not be empty"),
        (request(SYSTEM), "last turn"),
        (request(HELLO, CallerTurn(Role.ASSISTANT, "Hi")), "last turn"),
        (request(CallerTurn(Role.USER, " \n")), "no content"),
        (request(*[HELLO] * (completions.MAX_TURNS + 1)), "at most"),
        (request(HELLO, max_tokens=-1), "negative"),
        (request(HELLO, session_key="has space"), "session key"),
        (request(HELLO, session_key="k" * 129), "session key"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(bad: CompleteRequest, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        completions.validate(bad, max_message_chars=100)


def test_an_oversized_turn_is_too_large() -> None:
    with pytest.raises(MessageTooLarge):
        completions.validate(request(CallerTurn(Role.USER, "x" * 101)), max_message_chars=100)


def test_the_affinity_key_follows_the_opening_not_the_later_turns() -> None:
    short = request(SYSTEM, HELLO)
    longer = request(SYSTEM, HELLO, CallerTurn(Role.ASSISTANT, "Hi"), CallerTurn(Role.USER, "?"))
    key = completions.affinity_key("ada", short)
    assert key == completions.affinity_key("ada", longer)
    assert key != completions.affinity_key("bob", short)
    assert key != completions.affinity_key("ada", request(HELLO))
    assert len(key) <= 128  # the scheduler's limit for a conversation id


def test_a_session_key_overrides_the_opening() -> None:
    one = request(HELLO, session_key="s1")
    other = request(SYSTEM, CallerTurn(Role.USER, "Else"), session_key="s1")
    assert completions.affinity_key("ada", one) == completions.affinity_key("ada", other)


def test_the_callers_system_turn_replaces_the_platforms() -> None:
    assert completions.split_system(request(SYSTEM, HELLO), "default") == (SYSTEM, [HELLO])
    system, turns = completions.split_system(request(HELLO), "default")
    assert system == CallerTurn(Role.SYSTEM, "default") and turns == [HELLO]


def turn(role: Role, tokens: int) -> Turn:
    return Turn(role, "t", tokens)


def test_the_whole_history_fits_or_nothing_does() -> None:
    system = turn(Role.SYSTEM, 10)
    history = [turn(Role.USER, 30), turn(Role.ASSISTANT, 30), turn(Role.USER, 20)]
    prompt = completions.fit(system, history, window_tokens=100, answer_reserve=10)
    assert prompt.tokens == 90 and prompt.dropped_turns == 0
    # One token more and a conversation would drop the oldest turn; a completion refuses.
    with pytest.raises(MessageTooLarge, match="91 tokens"):
        completions.fit(system, [turn(Role.USER, 31), *history[1:]], 100, 10)
    with pytest.raises(MessageTooLarge):
        completions.fit(system, [turn(Role.USER, 95)], 100, 10)


def test_the_caller_may_ask_for_a_shorter_answer_never_a_longer_one() -> None:
    assert completions.answer_cap(300, 0) == 300
    assert completions.answer_cap(300, 50) == 50
    assert completions.answer_cap(300, 5000) == 300


async def test_a_reader_that_leaves_stops_the_run() -> None:
    run = MessageRun("ada", "k", "chatcmpl-1", "")
    await run.append(Delta("a"))
    async with completions.closing_events(run) as events:
        assert (await anext(events))[0][0] == 1
    assert run.stop_requested.is_set()
    await asyncio.sleep(0)
