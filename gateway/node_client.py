"""The gateway's typed client of the nodes: token counts (in the gateway, with the node's own
tokenizer once it has sent it), and one answer's stream as plain chunks and a finish, with a
cancel. One channel per node address, reused by every call."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import grpc

from chat.v1 import node_service_pb2, node_service_pb2_grpc
from domain.errors import Unavailable
from domain.types import Finish, Usage
from gateway.local_tokenizers import LocalTokenizers, OfferedTokenizer
from gateway.ports import Chunk, Finished, GenerateSpec, StreamBroken
from infra.convert import (
    FINISH_FROM_PB,
    TIER_TO_PB,
    options_to_pb,
    tool_call_from_pb,
    turn_to_pb,
)
from infra.keepalive import CLIENT_CHANNEL
from infra.tls import TlsConfig
from infra.tls_channel import open_channel

# A node behind a silent link fails its streams within 3 s, and the answer fails over.
# A subchannel of its own per channel: gRPC shares subchannels between channels to one target
# by default, so a channel opened anew (`NodeClient.forget`) would take over the old one's
# reconnect backoff and fail its calls all the same.
CHANNEL_OPTIONS = (*CLIENT_CHANNEL, ("grpc.use_local_subchannel_pool", 1))
# A node that cannot take a cancel this fast is gone, and its work with it.
CANCEL_TIMEOUT_S = 2.0
# How long calls still open on a forgotten channel (a token count) may finish.
FORGET_GRACE_S = 5.0
# A tokenizer file is a few MB (Llama 3's: 9); past this a node's offer is refused.
MAX_TOKENIZER_BYTES = 64 << 20
TOKENIZER_TIMEOUT_S = 30.0


class NodeRefused(Unavailable):
    """The node read the request and refused it (INVALID_ARGUMENT): no other replica would
    take it either."""


class Generation:
    """One Generate call: read() until a Finished; cancel() stops the engine at once (a
    stream merely closed keeps generating for the node's re-attach grace); close() always."""

    __slots__ = ("_call", "_cancel")

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:
        self._call = call
        self._cancel: asyncio.Task[None] | None = None

    async def start(self, spec: GenerateSpec) -> None:
        try:
            await self._call.write(node_service_pb2.GenerateRequest(start=start_pb(spec)))
        except grpc.aio.AioRpcError as error:
            raise _broken(error) from error

    async def read(self) -> Chunk | Finished:
        try:
            response = await self._call.read()
        except grpc.aio.AioRpcError as error:
            raise _broken(error) from error
        if response is grpc.aio.EOF:
            raise StreamBroken(None, "the stream ended without a finish")
        if response.HasField("chunk"):
            chunk = response.chunk
            return Chunk(chunk.index, chunk.text, chunk.pieces)
        return finished_from_pb(response.finish)

    def cancel(self) -> asyncio.Task[None]:
        """Sends the one cancel (a call takes one write at a time, so never two); the task
        ends when it is written or the node is gone."""
        if self._cancel is None:
            self._cancel = asyncio.create_task(self._send_cancel())
        return self._cancel

    async def _send_cancel(self) -> None:
        cancel = node_service_pb2.GenerateRequest(cancel=node_service_pb2.GenerateCancel())
        with contextlib.suppress(grpc.aio.AioRpcError, asyncio.InvalidStateError, TimeoutError):
            async with asyncio.timeout(CANCEL_TIMEOUT_S):
                await self._call.write(cancel)

    def close(self) -> None:
        self._call.cancel()


def start_pb(spec: GenerateSpec) -> node_service_pb2.GenerateStart:
    return node_service_pb2.GenerateStart(
        request_id=spec.request_id,
        turns=[turn_to_pb(t) for t in spec.turns],
        max_tokens=max(1, spec.max_tokens),
        tier=TIER_TO_PB[spec.tier],
        continue_from=spec.continue_from,
        prompt_tokens=spec.prompt_tokens,
        temperature=spec.temperature,
        options=options_to_pb(spec.options),
        count_texts=spec.count_texts,
        stream_interval_ms=round(spec.stream_interval_s * 1000),
    )


def finished_from_pb(finish: node_service_pb2.GenerateFinish) -> Finished:
    usage = finish.usage
    return Finished(
        FINISH_FROM_PB.get(finish.finish, Finish.ERROR),
        Usage(usage.input_tokens, usage.cached_tokens, usage.output_tokens),
        tuple(tool_call_from_pb(call) for call in finish.tool_calls),
        tuple(finish.text_tokens),
        finish.engine_lost,
    )


def _broken(error: grpc.aio.AioRpcError) -> Exception:
    if error.code() == grpc.StatusCode.INVALID_ARGUMENT:
        return NodeRefused(f"the node refused the request: {error.details()}")
    return StreamBroken(error.code().name, error.code().name)


class NodeClient:
    def __init__(
        self,
        rpc_timeout_s: float = 5.0,
        tls: TlsConfig | None = None,
        local_counts: bool = True,
    ) -> None:
        # The gateway's certificate (None: plaintext), for every node alike.
        self._tls = tls
        # local_counts false: every count is the node's Tokenize call.
        self.tokenizers = LocalTokenizers(self._offered if local_counts else _offer_none)
        self._stubs: dict[str, node_service_pb2_grpc.NodeServiceStub] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._rpc_timeout_s = rpc_timeout_s

    def stub(self, address: str) -> node_service_pb2_grpc.NodeServiceStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = self._channels[address] = open_channel(address, self._tls, CHANNEL_OPTIONS)
            stub = self._stubs[address] = node_service_pb2_grpc.NodeServiceStub(channel)
        return stub

    async def tokenize(self, address: str, texts: Sequence[str], model: str = "") -> list[int]:
        """Each text's token count in the node's own tokenizer: counted here once the node
        has sent it, else by the node. model: the model the node was picked for ('' any)."""
        counted = await self.tokenizers.count(address, texts, model)
        if counted is not None:
            return counted
        try:
            answer = await self.stub(address).Tokenize(
                node_service_pb2.TokenizeRequest(texts=list(texts)), timeout=self._rpc_timeout_s
            )
        except grpc.aio.AioRpcError as error:
            raise Unavailable(f"the node could not count tokens: {error.code().name}") from error
        return list(answer.token_counts)

    async def _offered(self, address: str, have: Sequence[str]) -> OfferedTokenizer | None:
        """The tokenizer file the node offers (its bytes unless its digest is in have), None
        when it offers none."""
        model, sha256, size = "", "", 0
        parts: list[bytes] = []
        call = self.stub(address).GetTokenizer(
            node_service_pb2.GetTokenizerRequest(have_sha256=have), timeout=TOKENIZER_TIMEOUT_S
        )
        try:
            async for response in call:
                model, sha256, size = response.model, response.sha256, size + len(response.part)
                if size > MAX_TOKENIZER_BYTES:
                    call.cancel()
                    raise Unavailable(f"the tokenizer file is over {MAX_TOKENIZER_BYTES} bytes")
                parts.append(response.part)
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.UNIMPLEMENTED:
                return None  # a node older than the call
            raise Unavailable(f"the node's tokenizer: {error.code().name}") from error
        return OfferedTokenizer(model, sha256, b"".join(parts)) if sha256 else None

    async def generate(self, address: str, spec: GenerateSpec) -> Generation:
        """A started answer stream; the caller reads it and closes it."""
        generation = Generation(self.stub(address).Generate())
        try:
            await generation.start(spec)
        except BaseException:
            generation.close()
            raise
        return generation

    def forget(self, address: str) -> None:
        """Drops the channel to a node found unreachable. A channel that failed to connect
        waits out its reconnect backoff (up to 2.4 s) and fails every call meanwhile, even
        once the node is back; a new one connects on its first call, as an idle one does."""
        self._stubs.pop(address, None)
        self.tokenizers.forget(address)
        channel = self._channels.pop(address, None)
        if channel is not None:
            closing = asyncio.create_task(channel.close(FORGET_GRACE_S))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        await self.tokenizers.close()
        await asyncio.gather(*self._closing, return_exceptions=True)
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._stubs.clear()


async def _offer_none(address: str, have: Sequence[str]) -> OfferedTokenizer | None:
    return None
