"""The answer streams a caller can open (a message sent, a running message attached to, a
completion), apart from the wire that carries them: ChatService serves each as a call of its
own, the edge link (gateway/edge_link.py) many of them on one stream. Both translate what is
yielded here and how it ends, so a stream behaves the same on either.

A stream yields batches of the answer's events, or, for an answer that runs in another region,
that region's messages as they came (they are protobuf already: relayed, never rebuilt). It
ends by returning, or by raising a DomainError (the call's status), RunAbandoned (this gateway
stopped writing the answer: the reader attaches elsewhere) or grpc.aio.AioRpcError (another
region's gateway ended it so)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from chat.v1 import chat_service_pb2 as pb
from gateway.auth import Authenticator
from gateway.completions import closing_events
from gateway.convert import (
    completion_from_pb,
    platform_tools_from_pb,
    pool_of,
    tool_approvals_from_pb,
)
from gateway.far_runs import FarRuns
from gateway.peer_client import PeerGateways
from gateway.pipeline import ChatPipeline
from gateway.regions import Forward, NoRegions, RegionRouter
from gateway.runs import Event
from gateway.send_request import SendRequest
from gateway.tool_loop import PlatformTools


class Relayed(Protocol):
    """A message of another region's answer stream: one event and those right after it."""

    @property
    def event(self) -> pb.ChatEvent: ...

    @property
    def more(self) -> list[pb.ChatEvent]: ...


EventBatch = list[tuple[int, Event]]
Batch = EventBatch | Relayed


@dataclass(frozen=True, slots=True)
class Caller:
    """Who opened a stream: the bearer token it carried (None: none), and the home region a
    message passed on by another region's gateway runs for ('' for everyone else)."""

    token: str | None
    serve_for: str = ""


class AnswerStreams:
    def __init__(
        self,
        auth: Authenticator,
        pipeline: ChatPipeline,
        regions: RegionRouter | NoRegions,
        far_runs: FarRuns,
        peers: PeerGateways,
        interval_s: float,
        tools: PlatformTools,
    ) -> None:
        self._auth = auth
        self._pipeline = pipeline
        self._regions = regions
        self._far_runs = far_runs
        self._peers = peers
        self._tools = tools
        # After an answer's first text, at most one batch per stream per interval, each
        # carrying every event that came meanwhile (MessageRun.follow_batches), unless the
        # wire paces its messages itself (interval_s given to a stream).
        self._interval_s = interval_s

    def _interval(self, interval_s: float | None) -> float:
        return self._interval_s if interval_s is None else interval_s

    async def send(
        self, caller: Caller, request: pb.SendMessageRequest, interval_s: float | None = None
    ) -> AsyncIterator[Batch]:
        user = await self._auth.user_of_token(caller.token)
        pool = pool_of(request.model)
        route = await self._regions.route(user, request.conversation_id, pool, caller.serve_for)
        if isinstance(route, Forward):
            async for response in self._peers.send(route, request, caller.token or ""):
                yield response
            return
        run = await route.pipeline.send(
            user,
            SendRequest(
                conversation_id=request.conversation_id,
                message_id=request.message_id,
                parent_id=request.parent_id,
                content=request.content,
                pool=pool,
                instructions=request.instructions,
                hold_back=request.hold_back,
                max_tokens=request.max_tokens,
                tools=tuple(platform_tools_from_pb(request)),
            ),
        )
        async for batch in run.follow_batches(0, interval_s=self._interval(interval_s)):
            yield batch

    async def attach(
        self, caller: Caller, request: pb.AttachMessageRequest, interval_s: float | None = None
    ) -> AsyncIterator[Batch]:
        user = await self._auth.user_of_token(caller.token)
        run = await self._far_runs.attach(user, request.message_id, caller.serve_for)
        if isinstance(run, Forward):
            async for response in self._peers.attach(run, request, caller.token or ""):
                yield response
            return
        async for batch in run.follow_batches(
            request.after_event_id, interval_s=self._interval(interval_s)
        ):
            yield batch

    async def complete(
        self, caller: Caller, request: pb.CompleteRequest, interval_s: float | None = None
    ) -> AsyncIterator[Batch]:
        """A completion, stopped when its reader goes away before the end (closing the stream
        stops it) unless it was asked to be resumable."""
        user = await self._auth.user_of_token(caller.token)
        if request.platform_tools or request.tool_approvals:
            # The harness's loop: several model calls and the tools between them.
            tools, approvals = platform_tools_from_pb(request), tool_approvals_from_pb(request)
            asked = completion_from_pb(request)
            async for batch in self._tools.run(user, asked, tools, approvals):
                yield batch
            return
        run = await self._pipeline.complete(user, completion_from_pb(request))
        async with closing_events(run, self._interval(interval_s), request.resumable) as batches:
            async for batch in batches:
                yield batch
