"""Answers in flight, shared by every gateway through Redis: idempotency, the event log, the
owner of each run, and takeover when that owner dies.

Keys, per run (member = user id + US + message id):
- `chat:run:<member>`  hash: fp (the request's fingerprint), conv, owner (a gateway id),
  plan (what a new owner needs to continue: prompt, pick, reservation), stop, ended.
  Created with SET-NX semantics by `claim`: the first gateway to claim a message id runs the
  model; every retry, on any gateway, follows the log instead.
- `chat:events:<member>`  stream; entry ids are `0-<event id>`, so event ids count 1, 2, 3...
  and a write with an id that is not the next one fails. That is the fence: a gateway that
  lost its run (it was slow, not dead) cannot write into the new owner's log.
- `chat:gateway:<id>`  a gateway's liveness, renewed every 0.67 s, gone 2 s after it dies;
  its value is the address the gateway serves gRPC on ("1" when it has none to give), so a
  gateway that finds a run's owner refusing connections there can end that wait at once.
- `chat:runs:active`  the runs not ended, which every gateway's sweeper scans for orphans.
- channel `chat:stop`  a stop asked at one gateway for a run another one owns.

`chat:` is the default `key_prefix`; regions sharing one Redis each take their own
(`chat:regions:<name>:`), so one region's sweeper never takes over another's runs and its stops
never reach another region's gateways (a channel is not in a database: only a prefix parts it).

The gateway key is computed inside two scripts, so this layout needs one Redis (or one
cluster slot), not a cluster spread over slots.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from domain.context import Prompt
from domain.errors import Unavailable
from domain.safety import OutputMode
from domain.types import Finish, Role, Tier, Turn, Usage
from gateway.answers import ANSWER_TEMPERATURE, AnswerPlan
from gateway.redis_buckets import UNAVAILABLE as REDIS_UNAVAILABLE
from gateway.run_sharing import OwnershipLost
from gateway.runs import Delta, Done, Event, Failed, Meta, Retract
from gateway.scheduler_client import ReplicaPick, pick_from_wire

KEY_PREFIX = "chat:"
RUN_PREFIX = "chat:run:"
EVENTS_PREFIX = "chat:events:"
GATEWAY_PREFIX = "chat:gateway:"
ACTIVE_KEY = "chat:runs:active"
STOP_CHANNEL = "chat:stop"
SEPARATOR = "\x1f"

# A claim whose owner died before it planned (no plan yet) is free to claim again.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  local owner = redis.call('HGET', KEYS[1], 'owner')
  local planned = redis.call('HEXISTS', KEYS[1], 'plan') == 1
  local ended = redis.call('HEXISTS', KEYS[1], 'ended') == 1
  if planned or ended or redis.call('EXISTS', ARGV[5] .. owner) == 1 then
    return redis.call('HMGET', KEYS[1], 'fp', 'conv', 'owner')
  end
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'conv', ARGV[2], 'owner', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return false
"""

_APPEND = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return 0
end
redis.call('XADD', KEYS[2], '0-' .. ARGV[2], 'e', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
"""

# A dead gateway's liveness, ended early by one that found its address refusing connections;
# only while it still names that address (a gateway that renewed it elsewhere lives on).
_FORGET_GATEWAY = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_TAKE_OVER = """
local owner = redis.call('HGET', KEYS[1], 'owner')
local reclaim = ARGV[3] == '1'
if not owner or (owner == ARGV[1]) ~= reclaim then
  return false
end
if redis.call('HEXISTS', KEYS[1], 'ended') == 1 or redis.call('HEXISTS', KEYS[1], 'plan') == 0 then
  return false
end
if not reclaim and redis.call('EXISTS', ARGV[2] .. owner) == 1 then
  return false
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1])
return redis.call('HMGET', KEYS[1], 'plan', 'stop', 'conv', 'fp')
"""

_ORPHANS = """
local out = {}
for _, member in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local owner = redis.call('HGET', ARGV[2] .. member, 'owner')
  if not owner then
    redis.call('ZREM', KEYS[1], member)
  elseif redis.call('EXISTS', ARGV[1] .. owner) == 0 then
    table.insert(out, member)
    if #out >= tonumber(ARGV[3]) then
      break
    end
  end
end
return out
"""


@dataclass(frozen=True, slots=True)
class Existing:
    """A claim another attempt holds: the same message, or another one under the same id."""

    fingerprint: str
    conversation_id: str
    owner: str


@dataclass(frozen=True, slots=True)
class Orphan:
    """A run whose owner died, now owned by this gateway, with what it needs to go on."""

    user_id: str
    message_id: str
    conversation_id: str
    fingerprint: str
    plan: AnswerPlan
    answer_parent_seq: int | None
    stop_requested: bool


@dataclass(frozen=True, slots=True)
class SharedRunsConfig:
    # A gateway silent this long is dead and its runs are taken over.
    liveness_s: float = 2.0
    # How long a run's keys live while it runs, and after it ended (for retries and resumes).
    running_ttl_s: int = 3600
    keep_after_end_s: int = 600
    sweep_interval_s: float = 1.0
    # How long one blocking read of a followed log waits before checking on the owner.
    follow_block_s: float = 1.0
    # What every key and the stop channel start with (the names above are the default's).
    key_prefix: str = KEY_PREFIX


@dataclass(frozen=True, slots=True)
class RemoteRun:
    """A run another gateway owns, followed through the shared log."""

    shared: SharedRuns
    user_id: str
    message_id: str
    fingerprint: str
    # Checks on the owner when the log is quiet, and takes the run over if it died.
    on_idle: Callable[[], Awaitable[None]]

    def follow_batches(
        self, after_event_id: int = 0, most: int = 64, interval_s: float = 0.0
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        return self.shared.follow(self.user_id, self.message_id, after_event_id, self.on_idle,
                                  most, interval_s)  # fmt: skip

    async def follow(self, after_event_id: int = 0) -> AsyncIterator[tuple[int, Event]]:
        async for batch in self.follow_batches(after_event_id):
            for item in batch:
                yield item


def _member(user_id: str, message_id: str) -> str:
    return f"{user_id}{SEPARATOR}{message_id}"


class SharedRuns:
    def __init__(
        self,
        redis: Redis,
        config: SharedRunsConfig,
        gateway_id: str = "",
        waiter: Redis | None = None,
    ) -> None:
        self._redis = redis
        # Blocking reads and the stop subscription wait longer than the short timeout that
        # keeps every other call fast when Redis is away, so they get a client of their own.
        self._waiter = waiter or redis
        self._config = config
        # The layout above under the config's prefix: gateways sharing a prefix share runs,
        # and gateways of different regions on one Redis never see each other's.
        prefix = config.key_prefix
        self._run_prefix, self._events_prefix = prefix + "run:", prefix + "events:"
        self._gateway_prefix, self._active_key = prefix + "gateway:", prefix + "runs:active"
        self._stop_channel = prefix + "stop"
        self.gateway_id = gateway_id or uuid.uuid4().hex
        self._claim = redis.register_script(_CLAIM)
        self._append = redis.register_script(_APPEND)
        self._take_over = redis.register_script(_TAKE_OVER)
        self._forget_gateway = redis.register_script(_FORGET_GATEWAY)
        self._orphans = redis.register_script(_ORPHANS)
        self._log = structlog.get_logger(component="shared-runs")

    @property
    def config(self) -> SharedRunsConfig:
        return self._config

    # The owner's side ---------------------------------------------------------------------------

    async def claim(
        self, user_id: str, message_id: str, fingerprint: str, conversation_id: str
    ) -> Existing | None:
        """None when this gateway now owns the message id; else who holds it."""
        member = _member(user_id, message_id)
        held = await self._claim(
            keys=[self._run_prefix + member],
            args=[fingerprint, conversation_id, self.gateway_id, self._config.running_ttl_s,
                  self._gateway_prefix],
        )  # fmt: skip
        if held is None:
            return None
        fp, conv, owner = (value.decode() if value else "" for value in held)
        return Existing(fp, conv, owner)

    async def release(self, user_id: str, message_id: str) -> None:
        """Gives a claim back when the message was refused before it ran."""
        await self._redis.delete(self._run_prefix + _member(user_id, message_id))

    async def record_plan(
        self, user_id: str, message_id: str, plan: AnswerPlan, answer_parent_seq: int | None
    ) -> None:
        member = _member(user_id, message_id)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._run_prefix + member, "plan", _encode_plan(plan, answer_parent_seq))
            pipe.zadd(self._active_key, {member: 0})
            await pipe.execute()

    async def append(self, user_id: str, message_id: str, event_id: int, event: Event) -> None:
        member = _member(user_id, message_id)
        encoded = encode_event(event)
        try:
            written = await self._append(
                keys=[self._run_prefix + member, self._events_prefix + member],
                args=[self.gateway_id, event_id, encoded, self._config.running_ttl_s],
            )
        except ResponseError as error:
            if await self._logged(member, event_id, encoded):
                # A retry of a write whose answer was lost on the way (Redis ran it).
                return
            raise OwnershipLost(f"event {event_id} is already in the log: {error}") from error
        if not written:
            raise OwnershipLost("another gateway owns this run now")

    async def _logged(self, member: str, event_id: int, encoded: str) -> bool:
        """Whether the log holds exactly this event at this id, and this gateway owns it."""
        entry_id = f"0-{event_id}"
        found = await self._redis.xrange(self._events_prefix + member, entry_id, entry_id)
        owner = await self._redis.hget(self._run_prefix + member, "owner")
        ours = owner is not None and owner.decode() == self.gateway_id
        return ours and bool(found) and found[0][1].get(b"e") == encoded.encode()

    async def end(self, user_id: str, message_id: str) -> None:
        member = _member(user_id, message_id)
        keep = self._config.keep_after_end_s
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._run_prefix + member, "ended", 1)
            pipe.expire(self._run_prefix + member, keep)
            pipe.expire(self._events_prefix + member, keep)
            pipe.zrem(self._active_key, member)
            await pipe.execute()

    async def keep_alive(self, address: str = "") -> None:
        """Renews this gateway's liveness until cancelled; its runs are taken over without it.
        address: where this gateway serves gRPC, for others to see it is gone."""
        ttl_ms = int(self._config.liveness_s * 1000)
        while True:
            try:
                await self._redis.set(self._gateway_prefix + self.gateway_id, address or 1,
                                      px=ttl_ms)  # fmt: skip
            except (OSError, RedisError) as error:
                self._log.warning("liveness not renewed", error=str(error))
            await asyncio.sleep(self._config.liveness_s / 3)

    async def retire(self) -> None:
        """At shutdown, after every run ended: nothing is left to take over."""
        with contextlib.suppress(OSError, RedisError):
            await self._redis.delete(self._gateway_prefix + self.gateway_id)
        if self._waiter is not self._redis:
            await self._waiter.aclose()

    # Anyone's side ------------------------------------------------------------------------------

    async def exists(self, user_id: str, message_id: str) -> Existing | None:
        held = await self._redis.hmget(
            self._run_prefix + _member(user_id, message_id), ["fp", "conv", "owner"]
        )
        if held[0] is None:
            return None
        fp, conv, owner = (value.decode() if value else "" for value in held)
        return Existing(fp, conv, owner)

    async def owner_address(self, user_id: str, message_id: str) -> tuple[str, str] | None:
        """The owner of a run not ended and the address it serves on, while its liveness
        lasts and names one."""
        member = _member(user_id, message_id)
        owner, ended = await self._redis.hmget(self._run_prefix + member, ["owner", "ended"])
        if owner is None or ended is not None:
            return None
        address = await self._redis.get(self._gateway_prefix + owner.decode())
        if address is None or address == b"1":
            return None
        return owner.decode(), address.decode()

    async def forget_gateway(self, gateway_id: str, address: str) -> bool:
        """Ends a dead gateway's liveness now; False when it no longer names that address."""
        forgotten = await self._forget_gateway(keys=[self._gateway_prefix + gateway_id],
                                               args=[address])  # fmt: skip
        return bool(forgotten)

    async def ask_stop(self, user_id: str, message_id: str) -> bool:
        """Asks the owner, wherever it is, to stop. False when the answer had already ended."""
        member = _member(user_id, message_id)
        state = await self._redis.hmget(self._run_prefix + member, ["owner", "ended"])
        if state[0] is None or state[1] is not None:
            return False
        # The owner writes the last event a moment before it marks the run ended.
        last = await self._redis.xrevrange(self._events_prefix + member, count=1)
        if last and isinstance(decode_event(last[0][1][b"e"]), Done | Failed):
            return False
        # Kept on the run too, so a gateway that takes it over later still stops it.
        await self._redis.hset(self._run_prefix + member, "stop", 1)
        await self._redis.publish(self._stop_channel, member)
        return True

    async def watch_stops(self, on_stop: Callable[[str, str], Awaitable[None]]) -> None:
        """Calls on_stop(user_id, message_id) for each stop asked anywhere, until cancelled."""
        while True:
            pubsub = self._waiter.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._stop_channel)
                async for message in pubsub.listen():
                    user_id, _, message_id = message["data"].decode().rpartition(SEPARATOR)
                    await on_stop(user_id, message_id)
            except (OSError, RedisError) as error:
                # A stop missed while Redis was away still reaches a run through its hash
                # when the run is taken over; live runs miss it (UNFINISHED: re-check stop
                # flags of local runs after a reconnect).
                self._log.warning("stop subscription lost; resubscribing", error=str(error))
                await asyncio.sleep(1.0)
            finally:
                with contextlib.suppress(OSError, RedisError):
                    await pubsub.aclose()

    async def follow(
        self,
        user_id: str,
        message_id: str,
        after_event_id: int,
        on_idle: Callable[[], Awaitable[None]],
        most: int = 64,
        interval_s: float = 0.0,
    ) -> AsyncIterator[list[tuple[int, Event]]]:
        """A run's events after after_event_id, as many at a time as the log holds (at most
        `most`), until it ends; on_idle runs whenever the log has been quiet for a while (the
        caller checks whether the owner is still alive). With interval_s, a read after a
        batch with text waits until interval_s after it (MessageRun.follow_batches: the
        log holds the events meanwhile; here the end may wait that long too)."""
        member = _member(user_id, message_id)
        cursor = f"0-{after_event_id}"
        block_ms = int(self._config.follow_block_s * 1000)
        loop = asyncio.get_running_loop()
        hold_until = 0.0
        while True:
            if hold_until > loop.time():
                await asyncio.sleep(hold_until - loop.time())
            try:
                answer = await self._waiter.xread(
                    {self._events_prefix + member: cursor}, count=most, block=block_ms
                )
            except REDIS_UNAVAILABLE as error:
                # UNAVAILABLE, not an unexpected error: the edge asks another gateway.
                raise Unavailable(f"the answer's log is unreachable: {error}") from error
            if not answer:
                state = await self._redis.hmget(self._run_prefix + member, ["owner", "ended"])
                if state[0] is None:
                    raise Unavailable("the answer expired before it ended")
                if state[1] is not None:
                    # Ended, and nothing after the cursor: the reader has it all already.
                    return
                await on_idle()
                continue
            batch = []
            for entry_id, fields in answer[0][1]:
                cursor = entry_id.decode()
                event = decode_event(fields[b"e"])
                batch.append((int(cursor.split("-")[1]), event))
                if isinstance(event, Done | Failed):
                    yield batch
                    return
            if 0 < interval_s and len(batch) < most and any(isinstance(e, Delta) for _, e in batch):
                hold_until = loop.time() + interval_s
            yield batch

    async def read_all(self, user_id: str, message_id: str) -> list[Event]:
        entries = await self._redis.xrange(self._events_prefix + _member(user_id, message_id))
        return [decode_event(fields[b"e"]) for _, fields in entries]

    async def take_over(
        self, user_id: str, message_id: str, reclaim: bool = False
    ) -> Orphan | None:
        """Makes this gateway the owner of a run whose owner died; None if it is not orphaned
        (alive, ended, or another gateway won the race). With reclaim, the run is one this
        gateway left while Redis was away: it is taken back only if it still owns it (no other
        gateway took it over meanwhile) and the run has not ended."""
        member = _member(user_id, message_id)
        taken = await self._take_over(keys=[self._run_prefix + member],
                                      args=[self.gateway_id, self._gateway_prefix,
                                            "1" if reclaim else "0"])  # fmt: skip
        if not taken:
            return None
        plan, parent_seq = _decode_plan(taken[0])
        conversation_id, fingerprint = taken[2].decode(), taken[3].decode()
        stop_requested = taken[1] is not None
        return Orphan(user_id, message_id, conversation_id, fingerprint, plan, parent_seq,
                      stop_requested)  # fmt: skip

    async def orphans(self, limit: int = 100) -> list[tuple[str, str]]:
        members = await self._orphans(
            keys=[self._active_key], args=[self._gateway_prefix, self._run_prefix, limit]
        )
        found = []
        for member in members:
            user_id, _, message_id = member.decode().rpartition(SEPARATOR)
            found.append((user_id, message_id))
        return found


# Codecs ---------------------------------------------------------------------------------------


def encode_event(event: Event) -> str:
    match event:
        case Meta():
            body = {"k": "meta", "message_id": event.message_id,
                    "conversation_id": event.conversation_id, "model": event.model,
                    "replica_id": event.replica_id, "region": event.region,
                    "region_notice": event.region_notice, "version": event.version,
                    "downgraded": event.downgraded, "slice": event.slice,
                    "pool": event.pool, "pool_reason": event.pool_reason}  # fmt: skip
        case Delta():
            body = {"k": "delta", "text": event.text}
        case Retract():
            body = {"k": "retract", "chars": event.chars}
        case Done():
            usage = event.usage
            body = {"k": "done", "finish": event.finish.value, "input": usage.input_tokens,
                    "cached": usage.cached_tokens, "output": usage.output_tokens}  # fmt: skip
        case Failed():
            body = {"k": "failed", "code": event.code, "message": event.message}
        case _:
            # The tool loop's answers stay with the gateway that runs them (gateway/
            # tool_messages.py): their events are never written to the shared log.
            raise ValueError(f"a {type(event).__name__} event is never shared")
    return json.dumps(body, separators=(",", ":"))


def decode_event(raw: bytes | str) -> Event:
    body = json.loads(raw)
    match body["k"]:
        case "meta":
            # A log written before regions or versions has none of them: ''.
            return Meta(body["message_id"], body["conversation_id"], body["model"],
                        body["replica_id"], body.get("region", ""),
                        body.get("region_notice", ""), version=body.get("version", ""),
                        downgraded=body.get("downgraded", ""),
                        slice=body.get("slice", ""), pool=body.get("pool", ""),
                        pool_reason=body.get("pool_reason", ""))  # fmt: skip
        case "delta":
            return Delta(body["text"])
        case "retract":
            return Retract(body["chars"])
        case "done":
            usage = Usage(body["input"], body["cached"], body["output"])
            return Done(Finish(body["finish"]), usage)
        case "failed":
            return Failed(body["code"], body["message"])
    raise ValueError(f"unknown event kind {body['k']!r}")


def _encode_plan(plan: AnswerPlan, answer_parent_seq: int | None) -> str:
    return json.dumps(
        {
            "turns": [[t.role.value, t.text, t.tokens] for t in plan.prompt.turns],
            "dropped": plan.prompt.dropped_turns,
            "replica": plan.pick.to_json(),
            "max_answer_tokens": plan.max_answer_tokens,
            "reserved": plan.reserved,
            "pool": plan.pool,
            "tier": plan.tier.value,
            "window": plan.window_tokens,
            "output": plan.output_mode.value,
            "version": plan.version,
            "temperature": plan.temperature,
            "downgraded": plan.downgraded,
            "version_model": plan.version_model,
            "slice": plan.slice,
            "pool_reason": plan.pool_reason,
            "parent_seq": answer_parent_seq,
        },
        separators=(",", ":"),
    )


def _decode_plan(raw: bytes) -> tuple[AnswerPlan, int | None]:
    body = json.loads(raw)
    prompt = Prompt(tuple(Turn(Role(r), text, n) for r, text, n in body["turns"]), body["dropped"])
    # "pick": the protobuf an earlier release wrote, read so a takeover during an upgrade works.
    pick = (
        ReplicaPick.from_json(body["replica"])
        if "replica" in body
        else pick_from_wire(base64.b64decode(body["pick"]))
    )
    # "output": absent from plans an earlier release wrote, which always held back.
    plan = AnswerPlan(prompt, pick, body["max_answer_tokens"], body["reserved"], body["pool"],
                Tier(body["tier"]), body.get("window", 0),
                OutputMode(body.get("output", OutputMode.HOLDBACK)))  # fmt: skip
    # "version", "temperature", "downgraded": absent from plans an earlier release wrote.
    plan = dataclasses.replace(plan, version=body.get("version", ""),
                               temperature=body.get("temperature", ANSWER_TEMPERATURE),
                               downgraded=body.get("downgraded", ""),
                               version_model=body.get("version_model", ""),
                               slice=body.get("slice", ""),
                               pool_reason=body.get("pool_reason", ""))  # fmt: skip
    return plan, body["parent_seq"]
