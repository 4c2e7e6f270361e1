"""The Python chat client of the platform: how internal services call it.

Services speak gRPC to a gateway (`chat.v1.ChatService`) with a user's bearer token; operators'
tools have their own client (clients/admin_client.py). This module hides protobuf: every call
takes and returns plain, typed dataclasses, and every failure is one exception type,
`ClientError(code, message, retry_after_s)` (clients/base.py).

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
from datetime import datetime

import grpc

from chat.v1 import chat_service_pb2 as chat_pb
from chat.v1 import chat_service_pb2_grpc as chat_grpc
from clients.base import DEFAULT_TIMEOUT_S, Client, ClientError, read_time
from domain.feedback import Rating
from infra.convert import (
    AUTO_MODEL,
    FINISH_NAMES,
    MODEL_CHOICES,
    RATING_TO_PB,
    ROLE_NAMES,
    TIER_NAMES,
)
from infra.tls import TlsConfig

# Re-attaches in a row without a new event before send() gives up.
DEFAULT_MAX_RESUMES = 5

# The model names send() takes.
MODELS = MODEL_CHOICES
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}


def new_message_id() -> str:
    return f"m_{uuid.uuid4().hex}"


def new_conversation_id() -> str:
    return f"c_{uuid.uuid4().hex[:16]}"


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
        read_time(c.created_at),
        read_time(c.updated_at),
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
        created_at=read_time(m.created_at),
    )


# ChatService ------------------------------------------------------------------------------------


class ChatClient(Client):
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
