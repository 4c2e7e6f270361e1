"""Bytes that are not the method's request type are INVALID_ARGUMENT, with protobuf's reason,
on a real server (a node's, over a socket): grpc.aio alone answered UNKNOWN to them, as if the
server had failed. Found by tests/e2e/test_grpc_fuzz.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from chat.v1 import common_pb2
from chat.v1 import node_service_pb2 as node_pb
from chat.v1 import node_service_pb2_grpc as node_grpc
from infra.certs import Authority
from infra.grpcserver import GrpcServer
from infra.tls import Role, TlsConfig
from infra.tls_channel import open_channel
from nodeagent.request_registry import RequestRegistry
from nodeagent.servicer import NodeServicer
from nodeagent.sim import SimEngine

CALL_S = 5.0
NODE_ID = "node-d"
TOKENIZE = "/chat.v1.NodeService/Tokenize"
GENERATE = "/chat.v1.NodeService/Generate"
LINK = "/chat.v1.NodeService/Link"
# A string field that is not UTF-8: TokenizeRequest.texts, and GenerateRequest.start's
# request_id (field 1 of a message in field 1).
NOT_UTF8 = b"\x0a\x02\xff\xfe"
START_NOT_UTF8 = b"\x0a\x04" + NOT_UTF8
CORRUPT = b"\xff\xff\xff"


class CountingSim(SimEngine):
    """The simulated engine, counting what reaches it. Its answers take seconds: a stream is
    still answering when its next message arrives."""

    def __init__(self) -> None:
        super().__init__(speed=1.0, answer_lengths=(400, 400))
        self.generated: list[str] = []
        self.tokenized: list[list[str]] = []

    def generate(self, request):  # type: ignore[no-untyped-def]
        self.generated.append(request.request_id)
        return super().generate(request)

    async def tokenize(self, texts: list[str]) -> list[int]:
        self.tokenized.append(texts)
        return await super().tokenize(texts)


@dataclass
class Node:
    address: str
    engine: CountingSim
    # The plaintext port that serves health alone, for probes.
    health_address: str


async def serve_node(tls: TlsConfig) -> AsyncIterator[Node]:
    engine = CountingSim()
    await engine.start()
    registry = RequestRegistry(engine, keep_after_finish_s=5, reattach_grace_s=1)
    accepting = asyncio.Event()
    accepting.set()
    server = GrpcServer(
        "127.0.0.1:0", ["chat.v1.NodeService"], tls=tls, health_listen="127.0.0.1:0"
    )
    node_grpc.add_NodeServiceServicer_to_server(
        NodeServicer(engine, registry, accepting), server.server
    )
    await server.start()
    await server.set_serving(True)
    try:
        yield Node(server.address, engine, f"127.0.0.1:{server.health_port}")
    finally:
        await server.stop(1)
        await registry.close()
        await engine.stop()


@pytest.fixture(scope="module")
async def plain_node() -> AsyncIterator[Node]:
    async for node in serve_node(TlsConfig(insecure=True)):
        yield node


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("decoding-pki")
    authority = Authority.create()
    authority.save(folder)
    authority.save_holder(folder, Role.GATEWAY)
    authority.save_holder(folder, Role.CLIENT)
    authority.save_holder(folder, Role.NODE, NODE_ID)
    return folder


@pytest.fixture(scope="module")
async def tls_node(pki: Path) -> AsyncIterator[Node]:
    async for node in serve_node(TlsConfig.in_folder(pki, f"{Role.NODE}-{NODE_ID}")):
        yield node


def start(request_id: str) -> bytes:
    return node_pb.GenerateRequest(
        start=node_pb.GenerateStart(
            request_id=request_id,
            max_tokens=1_000,
            prompt_tokens=5,
            turns=[common_pb2.Turn(role=common_pb2.ROLE_USER, content="Hello there.")],
        )
    ).SerializeToString()


async def raw_unary(channel: grpc.aio.Channel, method: str, raw: bytes) -> grpc.aio.AioRpcError:
    """Sends bytes as they are, as a client of another language or a broken one could."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await channel.unary_unary(method)(raw, timeout=CALL_S)
    return caught.value


async def raw_stream(channel: grpc.aio.Channel, method: str, messages: list[bytes]) -> tuple:
    """The status of a bidi call fed these raw messages, and how many answers came first."""
    call = channel.stream_stream(method)(iter(messages), timeout=CALL_S)
    answers = [answer async for answer in _until_error(call)]
    return await call.code(), await call.details(), len(answers)


async def _until_error(call: grpc.aio.StreamStreamCall) -> AsyncIterator[bytes]:
    try:
        async for answer in call:
            yield answer
    except grpc.aio.AioRpcError:
        return


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (CORRUPT, "Wire format was corrupt"),
        (NOT_UTF8, "String field had bad UTF-8"),
    ],
)
async def test_an_undecodable_unary_request_is_invalid_argument(
    plain_node: Node, raw: bytes, reason: str
) -> None:
    async with grpc.aio.insecure_channel(plain_node.address) as channel:
        error = await raw_unary(channel, TOKENIZE, raw)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "the request is not valid protobuf: Error parsing message with type "
        f"'chat.v1.TokenizeRequest': {reason}"
    )
    assert plain_node.engine.tokenized == []


async def test_an_undecodable_stream_message_is_invalid_argument(plain_node: Node) -> None:
    async with grpc.aio.insecure_channel(plain_node.address) as channel:
        first = await raw_stream(channel, GENERATE, [CORRUPT])
        # Later in the stream, read by the node's cancel watcher (a task of its own) while the
        # answer streams: the call ends refused (were it not, it would end OK with the answer).
        later = await raw_stream(channel, GENERATE, [start("r-later"), START_NOT_UTF8])
    assert first[:2] == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "the request is not valid protobuf: Error parsing message with type "
        "'chat.v1.GenerateRequest': Wire format was corrupt",
    )
    assert later[:2] == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "the request is not valid protobuf: Error parsing message with type "
        "'chat.v1.GenerateRequest': String field had bad UTF-8",
    )
    assert plain_node.engine.generated == ["r-later"]


async def test_an_undecodable_message_right_after_a_frame_is_invalid_argument(
    plain_node: Node,
) -> None:
    """A link answers a cancel of an unknown answer with a frame at once, so the bytes that
    follow are read while the node writes that frame: the call still ends refused, at once,
    not at the caller's deadline (found by the fuzz test: 11 of 100 link calls hung)."""
    unknown = node_pb.LinkRequest(cancel=node_pb.LinkCancel(request_id="r-unknown"))
    async with grpc.aio.insecure_channel(plain_node.address) as channel:
        outcome = await raw_stream(channel, LINK, [unknown.SerializeToString(), CORRUPT])
    assert outcome == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "the request is not valid protobuf: Error parsing message with type "
        "'chat.v1.LinkRequest': Wire format was corrupt",
        2,
    )


async def test_requests_that_parse_still_reach_the_servicer(plain_node: Node) -> None:
    async with grpc.aio.insecure_channel(plain_node.address) as channel:
        reply = await node_grpc.NodeServiceStub(channel).Tokenize(
            node_pb.TokenizeRequest(texts=["one two three"]), timeout=CALL_S
        )
        # Unknown fields parse (protobuf skips them): field 99 as a varint.
        raw = node_pb.TokenizeRequest(texts=["four"]).SerializeToString() + b"\x98\x06\x01"
        answer = await channel.unary_unary(TOKENIZE)(raw, timeout=CALL_S)
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(), timeout=CALL_S)
        watched = await anext(aiter(watch))
        watch.cancel()
    assert len(reply.token_counts) == 1 and reply.token_counts[0] > 0
    assert len(node_pb.TokenizeResponse.FromString(answer).token_counts) == 1
    assert watched.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_refused_role_is_told_so_before_its_bytes_are_read(
    tls_node: Node, pki: Path
) -> None:
    async with open_channel(tls_node.address, TlsConfig.in_folder(pki, Role.CLIENT)) as channel:
        refused = await raw_unary(channel, TOKENIZE, CORRUPT)
    async with open_channel(tls_node.address, TlsConfig.in_folder(pki, Role.GATEWAY)) as channel:
        invalid = await raw_unary(channel, TOKENIZE, CORRUPT)
    assert refused.code() == grpc.StatusCode.PERMISSION_DENIED
    assert invalid.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert tls_node.engine.tokenized == []


async def test_the_health_port_refuses_undecodable_probes_too(plain_node: Node) -> None:
    async with grpc.aio.insecure_channel(plain_node.health_address) as channel:
        error = await raw_unary(channel, "/grpc.health.v1.Health/Check", CORRUPT)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "grpc.health.v1.HealthCheckRequest" in error.details()
