"""NodeService: translates the node's gRPC API to the request registry and the engine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import grpc
import structlog

from chat.v1 import node_service_pb2, node_service_pb2_grpc
from domain import answer_options
from domain.errors import InvalidArgument, NotFound, Unavailable
from domain.token_counts import TokenCounts
from domain.types import MAX_STREAM_INTERVAL_S
from infra.convert import ROLE_FROM_PB, options_from_pb
from infra.grpcserver import maps_domain_errors
from nodeagent.convert import finish_to_pb, request_from_pb
from nodeagent.engine import Engine, EngineError
from nodeagent.link_servicer import NodeGates, NodeLink
from nodeagent.request_registry import RequestRegistry, RunningRequest
from nodeagent.served_tokenizer import ServedTokenizer

MAX_TOKENIZE_TEXTS = 256


def _validate_start(start: node_service_pb2.GenerateStart, context_tokens: int) -> None:
    if not start.request_id:
        raise InvalidArgument("start.request_id is required")
    if not start.turns:
        raise InvalidArgument("start.turns must hold at least one turn")
    if any(t.role not in ROLE_FROM_PB for t in start.turns):
        raise InvalidArgument("every turn needs a role")
    if not 0 < start.max_tokens <= context_tokens:
        raise InvalidArgument(f"start.max_tokens must be within 1..{context_tokens}")
    answer_options.check(options_from_pb(start.options))
    if len(start.count_texts) > MAX_TOKENIZE_TEXTS:
        raise InvalidArgument(f"start.count_texts holds at most {MAX_TOKENIZE_TEXTS} texts")
    if start.stream_interval_ms > MAX_STREAM_INTERVAL_S * 1000:
        raise InvalidArgument(
            f"start.stream_interval_ms must be within 0..{MAX_STREAM_INTERVAL_S * 1000:.0f}"
        )
    if start.prompt_tokens + start.max_tokens > context_tokens:
        raise InvalidArgument(
            f"{start.prompt_tokens} prompt tokens and {start.max_tokens} answer tokens do not "
            f"fit this node's window of {context_tokens} tokens"
        )


class NodeServicer(node_service_pb2_grpc.NodeServiceServicer):
    def __init__(
        self,
        engine: Engine,
        registry: RequestRegistry,
        accepting: asyncio.Event,
        engine_ok: asyncio.Event | None = None,
        stream_interval_s: float = 0.0,
        token_counts: TokenCounts | None = None,
        tokenizer: ServedTokenizer | None = None,
        vouch_interval_s: float = 1.0,
    ) -> None:
        if not 0 <= stream_interval_s <= MAX_STREAM_INTERVAL_S:
            raise ValueError(f"stream_interval_s must be within 0..{MAX_STREAM_INTERVAL_S} s")
        if vouch_interval_s <= 0:
            raise ValueError("vouch_interval_s must be greater than 0")
        self._engine = engine
        # Tokens that come within this of the last chunk sent wait and go as one chunk.
        self._stream_interval_s = stream_interval_s
        self._registry = registry
        self._accepting = accepting
        self._engine_ok = engine_ok or _set_event()
        self.token_counts = token_counts if token_counts is not None else TokenCounts()
        # The tokenizer file gateways may count with; None: the node vouches for none.
        self._tokenizer = tokenizer
        self._gates = NodeGates(
            registry=registry,
            engine=engine,
            validate=lambda start: _validate_start(start, engine.context_tokens),
            accepting=accepting,
            engine_ok=self._engine_ok,
            stream_interval_s=stream_interval_s,
            count=self._count,
            vouch_interval_s=vouch_interval_s,
        )
        self._links: set[NodeLink] = set()

    async def _open(
        self, first: node_service_pb2.GenerateRequest
    ) -> tuple[RunningRequest, int, float]:
        """The request to follow, the chunk index to follow it from, and the stream interval:
        the start's own when it names one, else this node's."""
        kind = first.WhichOneof("kind")
        if kind == "start":
            _validate_start(first.start, self._engine.context_tokens)
            if not self._accepting.is_set():
                raise Unavailable("this node is draining; pick another replica")
            if not self._engine_ok.is_set():
                raise Unavailable("this node's engine is not answering; pick another replica")
            interval_s = first.start.stream_interval_ms / 1000 or self._stream_interval_s
            return self._registry.start(request_from_pb(first.start, interval_s)), 0, interval_s
        if kind == "attach":
            running = self._registry.get(first.attach.request_id)
            if running is None:
                raise NotFound(f"no running request {first.attach.request_id!r} on this node")
            return running, first.attach.after_chunk_index, self._stream_interval_s
        raise InvalidArgument("the first message of a Generate stream must be start or attach")

    @maps_domain_errors
    async def Generate(
        self,
        request_iterator: AsyncIterator[node_service_pb2.GenerateRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[node_service_pb2.GenerateResponse]:
        first = await anext(aiter(request_iterator), None)
        if first is None:
            raise InvalidArgument("the Generate stream closed before its first message")
        running, after, interval_s = await self._open(first)
        counting = self._count(first.start.count_texts) if first.HasField("start") else None
        watcher = asyncio.create_task(_watch_cancel(request_iterator, running))
        self._registry.follow_started(running)
        try:
            async for item in running.follow(after, interval_s):
                if isinstance(item, tuple):
                    index, pieces = item
                    chunk = node_service_pb2.TokenChunk(
                        index=index, text="".join(pieces), pieces=pieces if len(pieces) > 1 else ()
                    )
                    yield node_service_pb2.GenerateResponse(chunk=chunk)
                else:
                    finish = finish_to_pb(item, self._engine.model)
                    if counting is not None:
                        finish.finish.text_tokens.extend(await _counts_of(counting))
                    yield finish
        finally:
            self._registry.follow_ended(running)
            if counting is not None:
                counting.cancel()
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def Link(
        self,
        request_iterator: AsyncIterator[node_service_pb2.LinkRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[node_service_pb2.LinkResponse]:
        # Refusals concern one answer each and travel in its frames: nothing ends the link
        # but either side closing it.
        link = NodeLink(self._gates)
        self._links.add(link)
        if not self._accepting.is_set():
            link.end_when_idle()
        try:
            async for frame in link.run(request_iterator):
                yield frame
        finally:
            self._links.discard(link)

    def drain_links(self) -> None:
        """Ends each link once its answers are done: a draining node's server then stops
        without waiting out its grace for links that carry nothing more."""
        for link in self._links:
            link.end_when_idle()

    def _count(self, texts: Sequence[str]) -> asyncio.Task[list[int]] | None:
        """Counts the texts the gateway asked for beside the answer, while the engine works on
        it; the counts ride in the finish."""
        if not texts:
            return None
        return asyncio.create_task(self.token_counts.count(list(texts), self._engine.tokenize))

    @maps_domain_errors
    async def Tokenize(
        self, request: node_service_pb2.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> node_service_pb2.TokenizeResponse:
        if len(request.texts) > MAX_TOKENIZE_TEXTS:
            raise InvalidArgument(f"at most {MAX_TOKENIZE_TEXTS} texts per call")
        try:
            counts = await self.token_counts.count(list(request.texts), self._engine.tokenize)
        except EngineError as exc:
            raise Unavailable(f"the engine could not tokenize: {exc}") from exc
        return node_service_pb2.TokenizeResponse(token_counts=counts, model=self._engine.model)

    async def GetTokenizer(
        self, request: node_service_pb2.GetTokenizerRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[node_service_pb2.GetTokenizerResponse]:
        served = self._tokenizer
        if served is None:
            return
        if served.sha256 in request.have_sha256:
            yield node_service_pb2.GetTokenizerResponse(model=served.model, sha256=served.sha256)
            return
        for part in served.parts():
            yield node_service_pb2.GetTokenizerResponse(
                model=served.model, sha256=served.sha256, part=part
            )


async def _counts_of(counting: asyncio.Task[list[int]]) -> list[int]:
    """The counts, or none when the engine could not count: the answer is what was asked for,
    and a gateway keeps its upper bound for a count it does not get."""
    try:
        return await counting
    except (EngineError, Unavailable) as error:
        structlog.get_logger(component="node-servicer").warning(
            "texts asked for beside an answer were not counted", reason=str(error)
        )
        return []


def _set_event() -> asyncio.Event:
    event = asyncio.Event()
    event.set()
    return event


async def _watch_cancel(
    request_iterator: AsyncIterator[node_service_pb2.GenerateRequest], running: RunningRequest
) -> None:
    # A stream that closes without a cancel leaves the answer running so a gateway can
    # re-attach; only an explicit cancel aborts it in the engine.
    with contextlib.suppress(grpc.aio.AioRpcError, asyncio.CancelledError):
        async for message in request_iterator:
            if message.WhichOneof("kind") == "cancel":
                running.cancel()
                return
