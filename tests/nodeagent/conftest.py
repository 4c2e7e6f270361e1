from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from chat.v1 import node_service_pb2_grpc
from infra.grpcserver import GrpcServer
from nodeagent.llamacpp import LlamaCppEngine
from nodeagent.requests import RequestRegistry
from nodeagent.servicer import NodeServicer


@pytest.fixture(scope="session")
async def engine() -> AsyncIterator[LlamaCppEngine]:
    """A real llama-server with SmolLM2-135M, once per session."""
    started = LlamaCppEngine("smollm2-135m-instruct", slot_context_tokens=2048, parallel=2)
    await started.start()
    yield started
    await started.stop()


class NodeUnderTest:
    def __init__(self, engine: LlamaCppEngine) -> None:
        self.accepting = asyncio.Event()
        self.accepting.set()
        self.engine_ok = asyncio.Event()
        self.engine_ok.set()
        self.registry = RequestRegistry(engine, keep_after_finish_s=30, reattach_grace_s=1.0)
        self.server = GrpcServer("127.0.0.1:0", ["chat.v1.NodeService"])
        node_service_pb2_grpc.add_NodeServiceServicer_to_server(
            NodeServicer(engine, self.registry, self.accepting, self.engine_ok), self.server.server
        )
        self.channel = grpc.aio.insecure_channel(self.server.address)
        self.stub = node_service_pb2_grpc.NodeServiceStub(self.channel)


@pytest.fixture(scope="session")
async def node(engine: LlamaCppEngine) -> AsyncIterator[NodeUnderTest]:
    under_test = NodeUnderTest(engine)
    await under_test.server.start()
    yield under_test
    await under_test.channel.close()
    await under_test.server.stop(1)
    await under_test.registry.close()
