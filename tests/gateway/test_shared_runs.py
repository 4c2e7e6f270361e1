"""Answers in flight shared through a real Redis: one claim per message id, a fenced event log
any gateway can follow, and takeover only once the owner's liveness is gone."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from redis.asyncio import Redis

from chat.v1 import scheduler_service_pb2
from domain.context import Prompt
from domain.safety import OutputMode
from domain.types import Finish, Role, Tier, Turn, Usage
from gateway.answers import AnswerPlan
from gateway.redis_buckets import connect
from gateway.runs import Delta, Done, Meta, Retract
from gateway.scheduler_client import ReplicaPick
from gateway.shared_runs import (
    GATEWAY_PREFIX,
    STOP_CHANNEL,
    OwnershipLost,
    SharedRuns,
    SharedRunsConfig,
    _decode_plan,
    _encode_plan,
    decode_event,
    encode_event,
)
from tests.servers import run_redis

FAST = SharedRunsConfig(liveness_s=0.6, follow_block_s=0.1, keep_after_end_s=30)


@pytest.fixture
async def redis(redis_server) -> AsyncIterator[Redis]:
    # Timeouts as the gateway's own clients have them (generous here): a reply that never comes
    # fails the test where it was awaited instead of hanging it (it hung once in CI, unexplained).
    client = connect(redis_server.url, timeout_s=5.0)
    yield client
    await client.aclose()


def _plan() -> AnswerPlan:
    prompt = Prompt((Turn(Role.SYSTEM, "Be brief.", 3), Turn(Role.USER, "Hi there", 2)), 0)
    pick = ReplicaPick(node_id="node-a", address="127.0.0.1:1", model="m", context_tokens=2048)
    return AnswerPlan(prompt, pick, 64, 123.5, "small", Tier.PLUS)


def _ids() -> tuple[str, str]:
    return f"u_{uuid.uuid4().hex[:8]}", f"m_{uuid.uuid4().hex[:8]}"


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    """Returns once check() holds; fails the test after timeout_s."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await check():
        assert loop.time() < deadline, f"{check.__name__} did not hold within {timeout_s} s"
        await asyncio.sleep(0.01)


async def _alive(runs: SharedRuns, redis: Redis) -> asyncio.Task[None]:
    task = asyncio.create_task(runs.keep_alive())

    async def renewed() -> bool:
        return bool(await redis.exists(GATEWAY_PREFIX + runs.gateway_id))

    await _until(renewed)
    return task


async def _blocked_readers(redis: Redis) -> int:
    """Clients blocked in a command (XREAD BLOCK here): a follower waiting for events."""
    return sum(1 for client in await redis.client_list() if "b" in client["flags"])


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def test_a_meta_logged_before_regions_reads_with_no_region() -> None:
    old = '{"k":"meta","message_id":"m1","conversation_id":"c1","model":"m","replica_id":"n"}'
    assert decode_event(old) == Meta("m1", "c1", "m", "n", "", "")


def test_events_survive_the_codec() -> None:
    events = [
        Meta("m1", "c1", "model", "node-1"),
        Meta("m1", "c1", "model", "node-1", "b", "Your home region a is unavailable"),
        # What a follower at another gateway tells its client of the pool, too.
        Meta("m1", "c1", "model", "node-1", pool="small", pool_reason="tier"),
        Delta("héllo\n"),
        Retract(6),
        Done(Finish.STOP, Usage(10, 4, 7)),
    ]
    assert [decode_event(encode_event(e)) for e in events] == events


def test_a_plan_keeps_its_output_mode_and_an_earlier_one_held_back() -> None:
    plan = dataclasses.replace(_plan(), output_mode=OutputMode.RETRACT)
    raw = _encode_plan(plan, None)
    assert json.loads(raw)["output"] == "retract"
    assert _decode_plan(raw.encode()) == (plan, None)
    earlier = json.loads(raw)
    del earlier["output"]
    assert _decode_plan(json.dumps(earlier).encode())[0].output_mode is OutputMode.HOLDBACK


def test_a_plan_is_plain_json_and_an_earlier_releases_plan_still_reads() -> None:
    raw = _encode_plan(_plan(), 7)
    assert json.loads(raw)["replica"] == {
        "node_id": "node-a",
        "address": "127.0.0.1:1",
        "model": "m",
        "ladder_rung": 0,
        "expected_wait_s": 0.0,
        "context_tokens": 2048,
    }
    assert _decode_plan(raw.encode()) == (_plan(), 7)
    # Earlier releases kept the pick as base64 protobuf: a takeover mid-upgrade reads it.
    earlier = json.loads(raw)
    del earlier["replica"]
    earlier["pick"] = base64.b64encode(
        scheduler_service_pb2.PickReplicaResponse(
            node_id="node-a", address="127.0.0.1:1", model="m", context_tokens=2048
        ).SerializeToString()
    ).decode()
    assert _decode_plan(json.dumps(earlier).encode()) == (_plan(), 7)


async def test_one_claim_per_message_id(redis) -> None:
    a, b = SharedRuns(redis, FAST), SharedRuns(redis, FAST)
    alive = await _alive(a, redis)
    user, message = _ids()
    try:
        assert await a.claim(user, message, "fp1", "c1") is None
        held = await b.claim(user, message, "fp1", "c1")
        assert held is not None and held.owner == a.gateway_id and held.fingerprint == "fp1"
        # The same id with another body is told apart by its fingerprint.
        other = await b.claim(user, message, "fp2", "c1")
        assert other is not None and other.fingerprint == "fp1"
        # A claim given back (the message was refused) can be claimed again.
        await a.release(user, message)
        assert await b.claim(user, message, "fp2", "c1") is None
    finally:
        await _stop(alive)


async def test_a_claim_abandoned_before_planning_is_free_again(redis) -> None:
    a, b = SharedRuns(redis, FAST), SharedRuns(redis, FAST)
    user, message = _ids()
    # a never renewed its liveness: it is dead, and it never recorded a plan.
    assert await a.claim(user, message, "fp", "c1") is None
    assert await b.claim(user, message, "fp", "c1") is None


async def test_followers_read_the_log_from_any_event_and_live(redis) -> None:
    owner, reader = SharedRuns(redis, FAST), SharedRuns(redis, FAST)
    alive = await _alive(owner, redis)
    user, message = _ids()
    try:
        async with asyncio.timeout(30):  # where it waits is in the traceback, if it hangs
            await owner.claim(user, message, "fp", "c1")
            await owner.record_plan(user, message, _plan(), 4)
            await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
            await owner.append(user, message, 2, Delta("Hello"))

            async def idle() -> None:
                return None

            async def read(after: int) -> list[tuple[int, object]]:
                return [item async for batch in reader.follow(user, message, after, idle)
                        for item in batch]  # fmt: skip

            blocked_before = await _blocked_readers(redis)
            following = asyncio.create_task(read(1))

            async def waiting() -> bool:
                return await _blocked_readers(redis) > blocked_before

            await _until(waiting)  # the follower reads live from here
            await owner.append(user, message, 3, Delta(" world"))
            await owner.append(user, message, 4, Done(Finish.STOP, Usage(5, 0, 2)))
            await owner.end(user, message)
            events = await asyncio.wait_for(following, 5)
            assert [event_id for event_id, _ in events] == [2, 3, 4]
            # From after the last event of an ended run: nothing, at once.
            assert await asyncio.wait_for(read(4), 5) == []
            assert [e.text for _, e in events if isinstance(e, Delta)] == ["Hello", " world"]
            assert await redis.zscore("chat:runs:active", f"{user}\x1f{message}") is None
    finally:
        await _stop(alive)


async def test_the_log_is_fenced(redis) -> None:
    owner, other = SharedRuns(redis, FAST), SharedRuns(redis, FAST)
    user, message = _ids()
    await owner.claim(user, message, "fp", "c1")
    await owner.record_plan(user, message, _plan(), None)
    await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
    with pytest.raises(OwnershipLost):
        await owner.append(user, message, 1, Delta("again"))  # an id already written
    with pytest.raises(OwnershipLost):
        await other.append(user, message, 2, Delta("not mine"))  # not the owner
    with pytest.raises(OwnershipLost):
        await other.append(user, message, 1, Meta(message, "c1", "m", "node-a"))  # same, not mine


async def test_a_write_sent_again_after_its_answer_was_lost_is_not_a_lost_run(redis) -> None:
    """Redis ran the write but its answer never came back (a link that fell silent): the
    owner writes the same event again and must not take the refusal for a takeover."""
    owner = SharedRuns(redis, FAST)
    user, message = _ids()
    await owner.claim(user, message, "fp", "c1")
    await owner.record_plan(user, message, _plan(), None)
    await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
    await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
    await owner.append(user, message, 2, Delta("on"))
    assert await owner.read_all(user, message) == [Meta(message, "c1", "m", "node-a"), Delta("on")]


@contextlib.asynccontextmanager
async def _owner_on_its_own_redis(
    config: SharedRunsConfig,
) -> AsyncIterator[tuple[SharedRuns, Redis, int, str, str]]:
    """A run with its first event written, on a Redis of its own (the tests stop it), through
    a client whose timeout is shorter than the gateway's 0.5 s; and a patient admin client."""
    user, message = _ids()
    with run_redis() as server:
        quick, admin = connect(server.url, timeout_s=0.2), connect(server.url, timeout_s=5.0)
        owner = SharedRuns(quick, config)
        try:
            await owner.claim(user, message, "fp", "c1")
            await owner.record_plan(user, message, _plan(), None)
            await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
            yield owner, admin, server.pid, user, message
        finally:
            os.kill(server.pid, signal.SIGCONT)
            await quick.aclose()
            await admin.aclose()


async def test_takeover_only_after_the_owner_stops_renewing(redis) -> None:
    owner, heir = SharedRuns(redis, FAST), SharedRuns(redis, FAST)
    alive = await _alive(owner, redis)
    heir_alive = await _alive(heir, redis)
    user, message = _ids()
    try:
        await owner.claim(user, message, "fp", "c1")
        await owner.record_plan(user, message, _plan(), 7)
        await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
        assert await heir.take_over(user, message) is None  # the owner is alive
        assert (user, message) not in await heir.orphans()
        await _stop(alive)

        async def orphaned() -> bool:
            return (user, message) in await heir.orphans()

        await _until(orphaned)  # once the owner's liveness key ran out
        orphan = await heir.take_over(user, message)
        assert orphan is not None
        assert orphan.conversation_id == "c1" and orphan.answer_parent_seq == 7
        assert orphan.plan == _plan()
        assert await SharedRuns(redis, FAST).take_over(user, message) is None  # heir owns it
        with pytest.raises(OwnershipLost):  # the old owner, back from a pause, is fenced out
            await owner.append(user, message, 2, Delta("late"))
        await heir.append(user, message, 2, Delta("go on"))
    finally:
        await _stop(heir_alive)


async def test_an_owner_is_named_with_its_address_and_forgotten_only_at_it(redis) -> None:
    # A liveness far longer than the test: only forgetting the owner can end it in time.
    slow = dataclasses.replace(FAST, liveness_s=60.0)
    owner, heir = SharedRuns(redis, slow), SharedRuns(redis, slow)
    alive = asyncio.create_task(owner.keep_alive("127.0.0.1:4242"))
    user, message = _ids()
    try:

        async def renewed() -> bool:
            return bool(await redis.exists(GATEWAY_PREFIX + owner.gateway_id))

        await _until(renewed)
        await owner.claim(user, message, "fp", "c1")
        await owner.record_plan(user, message, _plan(), None)
        await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
        assert await heir.owner_address(user, message) == (owner.gateway_id, "127.0.0.1:4242")
        assert await heir.take_over(user, message) is None
        # Its liveness names another address now: that gateway moved, and lives on.
        assert not await heir.forget_gateway(owner.gateway_id, "127.0.0.1:9999")
        assert await heir.take_over(user, message) is None
        assert await heir.forget_gateway(owner.gateway_id, "127.0.0.1:4242")
        orphan = await heir.take_over(user, message)
        assert orphan is not None and orphan.conversation_id == "c1"
        # The heir renews no liveness here: its run names no address to probe.
        assert await heir.owner_address(user, message) is None
        await heir.end(user, message)
        assert await owner.owner_address(user, message) is None  # ended
    finally:
        await _stop(alive)


async def test_a_stop_reaches_the_owner(redis) -> None:
    owner, asker = SharedRuns(redis, FAST), SharedRuns(redis, FAST)
    user, message = _ids()
    await owner.claim(user, message, "fp", "c1")
    await owner.record_plan(user, message, _plan(), None)
    heard: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    async def on_stop(user_id: str, message_id: str) -> None:
        await heard.put((user_id, message_id))

    watcher = asyncio.create_task(owner.watch_stops(on_stop))
    try:

        async def subscribed() -> bool:
            return any(count for _, count in await redis.pubsub_numsub(STOP_CHANNEL))

        await _until(subscribed)
        assert await asker.ask_stop(user, message) is True
        assert await asyncio.wait_for(heard.get(), 5) == (user, message)
        await owner.end(user, message)
        assert await asker.ask_stop(user, message) is False  # already ended
    finally:
        await _stop(watcher)


async def test_after_text_a_follower_reads_what_came_during_its_interval_at_once(redis) -> None:
    owner, reader = SharedRuns(redis, FAST), SharedRuns(redis, FAST)
    alive = await _alive(owner, redis)
    user, message = _ids()
    try:
        async with asyncio.timeout(30):
            await owner.claim(user, message, "fp", "c1")
            await owner.record_plan(user, message, _plan(), 4)
            await owner.append(user, message, 1, Meta(message, "c1", "m", "node-a"))
            await owner.append(user, message, 2, Delta("Hel"))

            async def idle() -> None:
                return None

            loop = asyncio.get_running_loop()
            batches = reader.follow(user, message, 0, idle, interval_s=2.0)
            assert [i for i, _ in await anext(batches)] == [1, 2]
            first_at = loop.time()
            following = asyncio.ensure_future(anext(batches))
            # Written while the follower holds its next read (2 s after a batch with text).
            for event_id, text in ((3, "lo"), (4, ","), (5, " you")):
                await owner.append(user, message, event_id, Delta(text))
            await owner.append(user, message, 6, Done(Finish.STOP, Usage(5, 0, 4)))
            assert [i for i, _ in await following] == [3, 4, 5, 6]
            assert loop.time() - first_at >= 2.0 - 0.05  # not read at once, event by event
    finally:
        await _stop(alive)
