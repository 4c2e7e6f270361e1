import asyncio

import pytest

from domain.types import Finish, Usage
from gateway.runs import Delta, Done, MessageRun, Meta, RunAbandoned, RunRegistry


def run(mid: str = "m1", user: str = "u1") -> MessageRun:
    return MessageRun(user, "c1", mid, fingerprint="f")


async def test_followers_get_every_event_once_in_order_even_when_late() -> None:
    r = run()
    await r.append(Meta("m1", "c1", "model", "node"))
    early = asyncio.create_task(_collect(r, 0))
    await r.append(Delta("a"))
    await r.append(Delta("b"))
    late = asyncio.create_task(_collect(r, 2))
    await r.append(Done(Finish.STOP, Usage(1, 0, 2)))
    assert [i for i, _ in await early] == [1, 2, 3, 4]
    assert [(i, e) for i, e in await late] == [
        (3, Delta("b")),
        (4, Done(Finish.STOP, Usage(1, 0, 2))),
    ]
    assert r.ended


async def test_a_follower_past_the_end_of_an_ended_run_gets_nothing_and_waits() -> None:
    r = run()
    await r.append(Done(Finish.STOP, Usage()))
    assert await _collect(r, 0) == [(1, Done(Finish.STOP, Usage()))]


async def test_registry_forgets_ended_runs_after_their_time() -> None:
    now = [0.0]
    registry = RunRegistry(lambda: now[0], keep_after_end_s=10)
    a, b = run("a"), run("b")
    registry.add(a)
    registry.add(b)
    await a.append(Done(Finish.STOP, Usage()))
    registry.mark_ended(a)
    assert registry.open_for("u1") == 1 and registry.running() == [b]
    now[0] = 11
    assert registry.get("u1", "a") is None
    assert registry.get("u1", "b") is b
    assert registry.get("someone-else", "b") is None


async def test_open_streams_count_only_runs_not_ended_however_they_ended() -> None:
    registry = RunRegistry(lambda: 0.0)
    runs = [run(f"m{i}") for i in range(5)]
    for r in runs:
        registry.add(r)
    assert registry.open_for("u1") == 5
    await runs[0].append(Done(Finish.STOP, Usage()))
    registry.mark_ended(runs[0])
    # Ended without being marked (its ending written elsewhere): still not open.
    await runs[1].append(Done(Finish.ERROR, Usage()))
    registry.discard(runs[2])
    assert registry.open_for("u1") == 2
    assert registry.open_for("someone-else") == 0
    assert registry.get("u1", "m1") is runs[1]  # ended runs stay for retries


async def _collect(r: MessageRun, after: int):
    return [item async for item in r.follow(after)]


async def test_a_reader_behind_the_answer_gets_what_piled_up_in_one_batch() -> None:
    from domain.types import Finish, Usage
    from gateway.runs import Delta, Done, MessageRun

    run = MessageRun("ada", "c1", "m1", "fp")
    for text in ("a", "b", "c"):
        await run.append(Delta(text))
    batches = run.follow_batches(0, most=2)
    assert [i for i, _ in await anext(batches)] == [1, 2]  # at most `most` at a time
    assert [i for i, _ in await anext(batches)] == [3]
    await run.append(Delta("d"))
    await run.append(Done(Finish.STOP, Usage()))
    await run.append(Delta("never"))  # nothing after the end is read
    assert [i for i, _ in await anext(batches)] == [4, 5]
    assert [i async for i, _ in run.follow(2)] == [3, 4, 5]


async def test_following_from_after_the_last_event_of_an_ended_run_returns_at_once() -> None:
    from domain.types import Finish, Usage
    from gateway.runs import Done, MessageRun, Meta

    run = MessageRun("ada", "c1", "m1", "fp")
    await run.append(Meta("m1", "c1", "model", "node"))
    await run.append(Done(Finish.STOP, Usage()))
    assert [i async for i, _ in run.follow(2)] == []
    assert [i async for i, _ in run.follow(1)] == [2]


async def test_a_run_this_gateway_stops_writing_sends_its_followers_elsewhere() -> None:
    r = run()
    await r.append(Meta("m1", "c1", "model", "node"))
    await r.append(Delta("a"))
    follower = r.follow_batches(0)
    assert [i for i, _ in await anext(follower)] == [1, 2]
    waiting = asyncio.ensure_future(anext(follower))
    await asyncio.sleep(0)  # one turn of the loop: it now waits for a third event
    assert not waiting.done()
    await r.abandon()
    with pytest.raises(RunAbandoned):
        await waiting
    # A follower that comes later still reads what there is, then is sent elsewhere too.
    late: list[tuple[int, object]] = []
    with pytest.raises(RunAbandoned):
        async for item in r.follow(1):
            late.append(item)
    assert late == [(2, Delta("a"))]


async def test_after_text_a_follower_holds_its_next_batch_until_the_end_releases_it() -> None:
    r = run()
    follower = r.follow_batches(0, interval_s=60.0)
    await r.append(Meta("m1", "c1", "model", "node"))
    assert [i for i, _ in await anext(follower)] == [1]
    await r.append(Delta("a"))
    # No hold after the meta event: the first text goes at once (time to first token).
    assert [i for i, _ in await asyncio.wait_for(anext(follower), 5.0)] == [2]
    waiting = asyncio.ensure_future(anext(follower))
    for text in ("b", "c", "d"):
        await r.append(Delta(text))
        await asyncio.sleep(0)  # the follower runs between appends, and keeps holding
    assert not waiting.done()
    await r.append(Done(Finish.STOP, Usage()))
    # The end goes at once, with everything held, long before the 60 s interval.
    assert [i for i, _ in await asyncio.wait_for(waiting, 5.0)] == [3, 4, 5, 6]


async def test_a_follower_behind_by_a_full_batch_does_not_hold() -> None:
    r = run()
    for text in ("a", "b", "c", "d", "e"):
        await r.append(Delta(text))
    follower = r.follow_batches(0, most=2, interval_s=60.0)
    batches = [await asyncio.wait_for(anext(follower), 5.0) for _ in range(2)]
    assert [[i for i, _ in batch] for batch in batches] == [[1, 2], [3, 4]]
