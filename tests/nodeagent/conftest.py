from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from chat.v1 import node_service_pb2_grpc
from infra.grpcserver import GrpcServer
from infra.tls import TlsConfig
from nodeagent.llamacpp import LlamaCppEngine
from nodeagent.request_registry import RequestRegistry
from nodeagent.served_tokenizer import ServedTokenizer
from nodeagent.servicer import NodeServicer


@pytest.fixture(scope="session")
async def engine() -> AsyncIterator[LlamaCppEngine]:
    """A real llama-server with SmolLM2-135M, once per session."""
    started = LlamaCppEngine("smollm2-135m-instruct", slot_context_tokens=2048, parallel=2)
    await started.start()
    yield started
    await started.stop()


class NodeUnderTest:
    def __init__(
        self,
        engine: LlamaCppEngine,
        stream_interval_s: float = 0.0,
        tokenizer: ServedTokenizer | None = None,
        servicer_type: type[NodeServicer] = NodeServicer,
    ) -> None:
        self.accepting = asyncio.Event()
        self.accepting.set()
        self.engine_ok = asyncio.Event()
        self.engine_ok.set()
        self.registry = RequestRegistry(engine, keep_after_finish_s=30, reattach_grace_s=1.0)
        self.server = GrpcServer(
            "127.0.0.1:0", ["chat.v1.NodeService"], tls=TlsConfig(insecure=True)
        )
        self.servicer = servicer_type(
            engine, self.registry, self.accepting, self.engine_ok, stream_interval_s,
            tokenizer=tokenizer,
        )  # fmt: skip
        node_service_pb2_grpc.add_NodeServiceServicer_to_server(self.servicer, self.server.server)
        self.channel = grpc.aio.insecure_channel(self.server.address)
        self.stub = node_service_pb2_grpc.NodeServiceStub(self.channel)


async def serve_node(under_test: NodeUnderTest) -> AsyncIterator[NodeUnderTest]:
    await under_test.server.start()
    yield under_test
    await under_test.channel.close()
    await under_test.server.stop(1)
    await under_test.registry.close()


@pytest.fixture(scope="session")
async def node(engine: LlamaCppEngine) -> AsyncIterator[NodeUnderTest]:
    async for under_test in serve_node(NodeUnderTest(engine)):
        yield under_test


@pytest.fixture(scope="session")
async def batching_node(engine: LlamaCppEngine) -> AsyncIterator[NodeUnderTest]:
    """The same engine behind a node that sends tokens at most every 0.3 s after the first."""
    async for under_test in serve_node(NodeUnderTest(engine, stream_interval_s=0.3)):
        yield under_test
