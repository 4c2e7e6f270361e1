"""The Python client of the chat platform: how internal services call it.

Services speak gRPC to a gateway (`chat.v1.ChatService`) with a user's bearer token, and
operators' tools speak to a scheduler (`chat.v1.SchedulerService`) with an admin token. This
module hides protobuf: every call takes and returns plain, typed dataclasses, and every failure
is one exception type, `ClientError(code, message, retry_after_s)`.

    tls = TlsConfig.in_folder(".chat/tls", "client")
    async with ChatClient("127.0.0.1:50052", token, tls=tls) as chat:
        async with contextlib.aclosing(chat.send("c1", "Why is the sky blue?")) as events:
            async for event in events:
                if isinstance(event, Delta):
                    print(event.text, end="")
                elif isinstance(event, Retract):  # the text so far was withdrawn
                    print("\n[withdrawn]")

`tls` is the CA and a certificate of the client role (or operator) that a platform with mutual
TLS asks for: `chatctl up` writes them to <state dir>/tls. Without it the client talks
plaintext, which only a platform started with `--insecure` answers.

`send` survives a broken stream: when the connection drops mid-answer (gRPC UNAVAILABLE, or a
stream that ends before `done`), it re-attaches with `AttachMessage` after the last event id it
saw, so callers see every event exactly once. The gateway keeps writing the answer while nobody
listens, so nothing is lost. A failure before the first event is raised instead: the caller may
send again with the same message id, which attaches to the first run rather than running the
model twice.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import grpc
from google.protobuf import timestamp_pb2

from chat.v1 import chat_service_pb2 as chat_pb
from chat.v1 import chat_service_pb2_grpc as chat_grpc
from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as sched_pb
from chat.v1 import scheduler_service_pb2_grpc as sched_grpc
from domain.feedback import Rating
from infra.convert import (
    AUTO_MODEL,
    FINISH_NAMES,
    MODEL_CHOICES,
    RATING_TO_PB,
    ROLE_NAMES,
    TIER_NAMES,
)
from infra.status import CallFailure
from infra.tls import TlsConfig
from infra.tls_channel import open_channel

# Unary calls give up after this long, so a hung server never hangs a script.
DEFAULT_TIMEOUT_S = 10.0
# Re-attaches in a row without a new event before send() gives up.
DEFAULT_MAX_RESUMES = 5

# The model names send() takes.
MODELS = MODEL_CHOICES
TIERS = {name: value for value, name in TIER_NAMES.items()}
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def _enum_name(value: int, enum: Any, prefix: str) -> str:
    """NODE_STATE_READY -> 'ready': the readable name callers compare against."""
    return enum.Name(value).removeprefix(prefix).lower()


def _time(stamp: timestamp_pb2.Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)


def new_message_id() -> str:
    return f"m_{uuid.uuid4().hex}"


def new_conversation_id() -> str:
    return f"c_{uuid.uuid4().hex[:16]}"


# Errors -----------------------------------------------------------------------------------------


class ClientError(Exception):
    """A call failed. code is the gRPC status name ("NOT_FOUND", "RESOURCE_EXHAUSTED"...);
    retry_after_s is set when the server said how long to wait (limits and shedding)."""

    def __init__(self, code: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s

    @classmethod
    def from_rpc(cls, error: grpc.aio.AioRpcError) -> ClientError:
        failure = CallFailure(error)
        return cls(failure.code.name, failure.message, failure.retry_after_s)

    def __str__(self) -> str:
        wait = f", retry in {self.retry_after_s:.0f} s" if self.retry_after_s is not None else ""
        return f"{self.message} ({self.code}{wait})"


# Chat values ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    cached_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Meta:
    event_id: int
    message_id: str
    conversation_id: str
    model: str
    replica_id: str
    # The region serving the answer, and the notice when the user's home region is out.
    region: str = ""
    region_notice: str = ""
    # The model version serving the answer; "" from a platform without versions.
    version: str = ""
    # "daily_budget" when the day's allowance is spent and a smaller pool answers; "" else.
    downgraded: str = ""
    # The user's slice of the rollout: current, candidate, holdout, kept or pinned.
    slice: str = ""
    # The pool serving the answer, and why it is not the one asked for: "tier" (picking a
    # pool is Plus's), "allowance", "ladder", "fallback", "router" (auto); "" when it is.
    pool: str = ""
    pool_reason: str = ""


@dataclass(frozen=True, slots=True)
class Delta:
    event_id: int
    text: str


@dataclass(frozen=True, slots=True)
class Retract:
    """The output check flagged text already shown (a tier in retract mode): drop all of the
    answer's text received so far. The refusal follows as a Delta; only it is stored."""

    event_id: int
    # How much was withdrawn, in characters (code points): everything of the answer so far.
    withdrawn_chars: int


@dataclass(frozen=True, slots=True)
class Done:
    event_id: int
    # stop | length | cancelled | refused | error
    finish: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class Error:
    """An error after the answer started; code is a gRPC status name."""

    event_id: int
    code: str
    message: str


ChatEvent = Meta | Delta | Retract | Done | Error


def answer_text(events: list[ChatEvent]) -> str:
    """The answer's text as it stands after these events: a Retract drops what came before."""
    pieces: list[str] = []
    for event in events:
        if isinstance(event, Delta):
            pieces.append(event.text)
        elif isinstance(event, Retract):
            pieces.clear()
    return "".join(pieces)


@dataclass(frozen=True, slots=True)
class Conversation:
    conversation_id: str
    title: str
    model: str
    total_tokens: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class Message:
    message_id: str
    conversation_id: str
    seq: int
    parent_id: str
    role: str
    content: str
    tokens: int
    model: str
    replica_id: str
    # As Done's; None for the user's turns, which no model wrote.
    finish: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Rated:
    """A rating as stored: the answer, "up" or "down", and the version that served it ('' for
    none)."""

    message_id: str
    rating: str
    version: str


@dataclass(frozen=True, slots=True)
class Limits:
    tier: str
    level: float
    capacity: float
    refill_per_second: float
    full_in_seconds: float


def event_from_pb(event: chat_pb.ChatEvent) -> ChatEvent:
    match event.WhichOneof("kind"):
        case "meta":
            m = event.meta
            return Meta(event.event_id, m.message_id, m.conversation_id, m.model, m.replica_id,
                        m.region, m.region_notice, m.version, m.downgraded,
                        m.slice, m.pool, m.pool_reason)  # fmt: skip
        case "delta":
            return Delta(event.event_id, event.delta.text)
        case "retract":
            return Retract(event.event_id, event.retract.withdrawn_chars)
        case "done":
            u = event.done.usage
            finish = FINISH_NAMES.get(event.done.finish, "error")
            usage = Usage(u.input_tokens, u.cached_tokens, u.output_tokens)
            return Done(event.event_id, finish, usage)
        case _:
            code = _CODE_NAMES.get(event.error.code, "UNKNOWN")
            return Error(event.event_id, code, event.error.message)


def _conversation(c: chat_pb.Conversation) -> Conversation:
    return Conversation(
        c.conversation_id,
        c.title,
        c.model,
        c.total_tokens,
        _time(c.created_at),
        _time(c.updated_at),
    )


def _message(m: chat_pb.Message) -> Message:
    return Message(
        message_id=m.message_id,
        conversation_id=m.conversation_id,
        seq=m.seq,
        parent_id=m.parent_id,
        role=ROLE_NAMES.get(m.role, "unknown"),
        content=m.content,
        tokens=m.tokens,
        model=m.model,
        replica_id=m.replica_id,
        finish=FINISH_NAMES.get(m.finish),
        created_at=_time(m.created_at),
    )


# The shared plumbing ----------------------------------------------------------------------------


class _Client:
    """One channel and one bearer token; unary calls turn gRPC errors into ClientError."""

    def __init__(self, address: str, token: str, timeout_s: float, tls: TlsConfig | None) -> None:
        if not address:
            raise ClientError("INVALID_ARGUMENT", "no address to call")
        self.address = address
        self._plaintext = tls is None or tls.insecure
        self._channel = open_channel(address, tls)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout_s = timeout_s

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    async def _unary(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as error:
            raise self._failure(error) from None

    def _failure(self, error: grpc.aio.AioRpcError) -> ClientError:
        failure = ClientError.from_rpc(error)
        if failure.code == "UNAVAILABLE" and "connect" in failure.message:
            # grpc's text names no service; say which address was down.
            failure.message = f"cannot reach {self.address}: {failure.message}"
            if self._plaintext:
                # A TLS server just closes the socket on a plaintext caller: say why it may.
                failure.message += (
                    " (called in plaintext, which a platform with mutual TLS refuses)"
                )
        return failure


# ChatService ------------------------------------------------------------------------------------


class ChatClient(_Client):
    """A user's view of the platform, through a gateway."""

    def __init__(
        self,
        gateway_address: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_resumes: int = DEFAULT_MAX_RESUMES,
        tls: TlsConfig | None = None,
    ) -> None:
        super().__init__(gateway_address, token, timeout_s, tls)
        self._stub = chat_grpc.ChatServiceStub(self._channel)
        self._max_resumes = max_resumes

    def send(
        self,
        conversation_id: str,
        content: str,
        message_id: str | None = None,
        parent_id: str = "",
        model: str = AUTO_MODEL,
    ) -> AsyncGenerator[ChatEvent]:
        """Sends a message and yields its answer's events, meta first, done (or error) last."""
        if model not in MODELS:
            raise ClientError("INVALID_ARGUMENT", "model must be one of auto, small, large")
        message_id = message_id or new_message_id()
        request = chat_pb.SendMessageRequest(
            conversation_id=conversation_id,
            message_id=message_id,
            parent_id=parent_id,
            content=content,
            model=MODELS[model],
        )
        # The call opens when the caller starts iterating, so an unread send costs nothing.
        return self._follow(
            message_id,
            lambda: self._stub.SendMessage(request, metadata=self._metadata),
            after_event_id=0,
            attached=False,
        )

    def resume(self, message_id: str, after_event_id: int = 0) -> AsyncGenerator[ChatEvent]:
        """Replays an answer's events after after_event_id, then follows it live."""
        return self._follow(
            message_id, lambda: self._attach(message_id, after_event_id), after_event_id
        )

    def _attach(self, message_id: str, after_event_id: int) -> grpc.aio.UnaryStreamCall:
        request = chat_pb.AttachMessageRequest(message_id=message_id, after_event_id=after_event_id)
        return self._stub.AttachMessage(request, metadata=self._metadata)

    async def _follow(
        self,
        message_id: str,
        open_call: Callable[[], grpc.aio.UnaryStreamCall],
        after_event_id: int,
        attached: bool = True,
    ) -> AsyncGenerator[ChatEvent]:
        """Yields each event once; re-attaches after the last one seen when the stream breaks."""
        last, breaks = after_event_id, 0
        while True:
            call = open_call()
            try:
                async for response in call:
                    # One event, or several when the gateway was ahead of this reader.
                    for raw in (response.event, *response.more):
                        event = event_from_pb(raw)
                        if event.event_id <= last:
                            continue  # a replay that overlaps what the caller already has
                        last, breaks = event.event_id, 0
                        yield event
                        if isinstance(event, Done | Error):
                            return
                broken: ClientError | None = None
            except grpc.aio.AioRpcError as error:
                broken = self._failure(error)
                # Before the first event of a send, the run may not exist: the caller decides.
                if broken.code != "UNAVAILABLE" or not (attached or last):
                    raise broken from None
            finally:
                call.cancel()
            breaks += 1
            if breaks > self._max_resumes:
                reason = broken.message if broken else "the stream ended before the answer did"
                raise ClientError("UNAVAILABLE", f"gave up re-attaching to {message_id}: {reason}")
            await asyncio.sleep(min(2.0, 0.1 * 2**breaks))
            open_call, attached = functools.partial(self._attach, message_id, last), True

    async def stop(self, message_id: str) -> bool:
        """Stops an answer and frees its GPU slot; False when it had already ended."""
        request = chat_pb.StopMessageRequest(message_id=message_id)
        return bool((await self._unary(self._stub.StopMessage, request)).stopped)

    async def rate(self, message_id: str, rating: str, comment: str = "") -> Rated:
        """Rates one of the caller's answers "up" or "down" (rating again replaces it)."""
        if rating not in RATING_TO_PB:
            raise ClientError("INVALID_ARGUMENT", "rating must be up or down")
        request = chat_pb.RateMessageRequest(message_id=message_id, comment=comment,
                                             rating=RATING_TO_PB[Rating(rating)])  # fmt: skip
        reply = await self._unary(self._stub.RateMessage, request)
        return Rated(reply.message_id, rating, reply.version)

    async def conversations(self, limit: int = 100) -> list[Conversation]:
        """The caller's conversations, newest first, up to limit (pages are fetched as needed)."""
        found: list[Conversation] = []
        token = ""
        while len(found) < limit:
            request = chat_pb.ListConversationsRequest(
                page_size=min(100, limit - len(found)), page_token=token
            )
            page = await self._unary(self._stub.ListConversations, request)
            found.extend(_conversation(c) for c in page.conversations)
            token = page.next_page_token
            if not token:
                break
        return found

    async def conversation(self, conversation_id: str) -> Conversation:
        request = chat_pb.GetConversationRequest(conversation_id=conversation_id)
        return _conversation((await self._unary(self._stub.GetConversation, request)).conversation)

    async def messages(self, conversation_id: str) -> list[Message]:
        request = chat_pb.ListMessagesRequest(conversation_id=conversation_id)
        reply = await self._unary(self._stub.ListMessages, request)
        return [_message(m) for m in reply.messages]

    async def delete_conversation(self, conversation_id: str) -> None:
        request = chat_pb.DeleteConversationRequest(conversation_id=conversation_id)
        await self._unary(self._stub.DeleteConversation, request)

    async def limits(self) -> Limits:
        reply = await self._unary(self._stub.GetLimits, chat_pb.GetLimitsRequest())
        return Limits(
            tier=TIER_NAMES.get(reply.tier, "unknown"),
            level=reply.level,
            capacity=reply.capacity,
            refill_per_second=reply.refill_per_second,
            full_in_seconds=reply.full_in_seconds,
        )


# SchedulerService (admin) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    node_id: str
    address: str
    model: str
    pool: str
    # starting | ready | draining | dead
    state: str
    context_tokens: int
    kv_capacity_tokens: int
    kv_usage: float
    free_kv_tokens: int
    queued_prefill_tokens: int
    running_requests: int
    waiting_requests: int
    prefix_hit_rate: float
    last_report_at: datetime


@dataclass(frozen=True, slots=True)
class LadderChange:
    at: datetime
    from_rung: int
    to_rung: int
    busy_share: float
    reason: str


@dataclass(frozen=True, slots=True)
class Ladder:
    # The rung gateways apply: the pinned one while pinned.
    rung: int
    busy_share: float
    pinned: bool
    # Whether this scheduler is the one that moves the ladder.
    leading: bool
    # The newest move last.
    history: list[LadderChange]


@dataclass(frozen=True, slots=True)
class User:
    user_id: str
    tier: str
    created_at: datetime
    has_token: bool
    # With regions: the home region and residency ('' and False without regions).
    home_region: str = ""
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class CreatedUser:
    user: User
    # Shown once: the platform keeps only its hash.
    token: str


def _node(n: sched_pb.NodeStatus) -> Node:
    reg, load = n.registration, n.load
    return Node(
        node_id=reg.node_id,
        address=reg.address,
        model=reg.model,
        pool=reg.pool,
        state=_enum_name(load.state, sched_pb.NodeState, "NODE_STATE_"),
        context_tokens=reg.context_tokens,
        kv_capacity_tokens=reg.kv_capacity_tokens,
        kv_usage=load.kv_usage,
        free_kv_tokens=load.free_kv_tokens,
        queued_prefill_tokens=load.queued_prefill_tokens,
        running_requests=load.running_requests,
        waiting_requests=load.waiting_requests,
        prefix_hit_rate=load.prefix_hit_rate,
        last_report_at=_time(n.last_report_at),
    )


def _ladder(reply: sched_pb.GetLadderResponse) -> Ladder:
    history = [
        LadderChange(_time(c.at), c.from_rung, c.to_rung, c.busy_share, c.reason)
        for c in reply.history
    ]
    return Ladder(reply.rung, reply.busy_share, reply.pinned, reply.leading, history)


def _user(u: sched_pb.User) -> User:
    return User(u.user_id, TIER_NAMES.get(u.tier, "unknown"), _time(u.created_at), u.has_token,
                u.home_region, u.pinned)  # fmt: skip


def _tier(tier: str) -> common_pb2.Tier:
    if tier not in TIERS:
        raise ClientError("INVALID_ARGUMENT", f"tier must be free or plus, not {tier!r}")
    return TIERS[tier]


class AdminClient(_Client):
    """The operators' view, through a scheduler's admin API (needs an admin token)."""

    def __init__(
        self,
        scheduler_address: str,
        admin_token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        tls: TlsConfig | None = None,
    ) -> None:
        super().__init__(scheduler_address, admin_token, timeout_s, tls)
        self._stub = sched_grpc.SchedulerServiceStub(self._channel)

    async def nodes(self, pool: str = "") -> list[Node]:
        reply = await self._unary(self._stub.ListNodes, sched_pb.ListNodesRequest(pool=pool))
        return sorted((_node(n) for n in reply.nodes), key=lambda n: n.node_id)

    async def drain(self, node_id: str) -> None:
        await self._unary(self._stub.DrainNode, sched_pb.DrainNodeRequest(node_id=node_id))

    async def undrain(self, node_id: str) -> None:
        await self._unary(self._stub.UndrainNode, sched_pb.UndrainNodeRequest(node_id=node_id))

    async def ladder(self) -> Ladder:
        return _ladder(await self._unary(self._stub.GetLadder, sched_pb.GetLadderRequest()))

    async def pin(self, rung: int | None) -> Ladder:
        """Pins the ladder at rung, or unpins it with None; answers the ladder as it now is."""
        request = (
            sched_pb.PinLadderRequest() if rung is None else sched_pb.PinLadderRequest(rung=rung)
        )
        await self._unary(self._stub.PinLadder, request)
        return await self.ladder()

    async def create_user(
        self, user_id: str, tier: str, home_region: str = "", pinned: bool = False
    ) -> CreatedUser:
        """With regions: home_region is the scheduler's own ('' says so), pinned keeps the
        user's conversations there."""
        request = sched_pb.CreateUserRequest(user_id=user_id, tier=_tier(tier),
                                             home_region=home_region, pinned=pinned)  # fmt: skip
        reply = await self._unary(self._stub.CreateUser, request)
        return CreatedUser(_user(reply.user), reply.token)

    async def users(self) -> list[User]:
        reply = await self._unary(self._stub.ListUsers, sched_pb.ListUsersRequest())
        return [_user(u) for u in reply.users]

    async def set_tier(self, user_id: str, tier: str) -> User:
        request = sched_pb.SetUserTierRequest(user_id=user_id, tier=_tier(tier))
        return _user((await self._unary(self._stub.SetUserTier, request)).user)

    async def rotate_token(self, user_id: str) -> str:
        request = sched_pb.RotateUserTokenRequest(user_id=user_id)
        return str((await self._unary(self._stub.RotateUserToken, request)).token)

    async def revoke_tokens(self, user_id: str) -> None:
        request = sched_pb.RevokeUserTokensRequest(user_id=user_id)
        await self._unary(self._stub.RevokeUserTokens, request)
