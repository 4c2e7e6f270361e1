"""A service's start and stop, on a real gRPC server: health says NOT_SERVING before the drains,
background work runs through the drains, and everything closes newest first."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest
import structlog
from grpc_health.v1 import health_pb2, health_pb2_grpc

from infra.grpcserver import GrpcServer
from infra.service import Service
from infra.tls import TlsConfig

SERVICE = "chat.v1.NodeService"


async def _health(address: str) -> str:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=5
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


class Log:
    """The service's log: tells the test when the service says it is ready."""

    def __init__(self) -> None:
        self.ready = asyncio.Event()

    def info(self, event: str, **fields: object) -> None:
        if event == "test ready":
            self.ready.set()


async def test_the_stop_drains_while_background_work_runs_then_closes_newest_first(
    tmp_path: Path,
) -> None:
    seen: list[str] = []
    stop = asyncio.Event()
    ready_file = tmp_path / "ready.json"
    log = Log()

    async def background() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            seen.append("background cancelled")

    async def close(name: str) -> None:
        seen.append(f"closed {name}")

    async def run() -> None:
        async with Service("test", log) as service:  # type: ignore[arg-type]
            service.closes(lambda: close("store"))
            server = await service.grpc(
                GrpcServer("127.0.0.1:0", [SERVICE], tls=TlsConfig(insecure=True))
            )
            service.closes(lambda: close("client"))
            service.task(background(), "background")

            async def drain() -> None:
                seen.append(f"drain sees {await _health(server.address)}")

            service.drains(drain)
            await service.serve(stop, str(ready_file), server.ready({}))

    serving = asyncio.create_task(run())
    await log.ready.wait()
    address = json.loads(ready_file.read_text())["grpc"]
    assert await _health(address) == "SERVING"
    stop.set()
    await serving
    assert seen == [
        "drain sees NOT_SERVING",
        "background cancelled",
        "closed client",
        "closed store",
    ]
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await _health(address)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_start_that_fails_half_way_closes_what_it_had_opened() -> None:
    closed: list[str] = []

    async def close() -> None:
        closed.append("store")

    async def failing_start() -> None:
        raise OSError("cannot listen on 127.0.0.1:1")

    with pytest.raises(OSError, match="cannot listen"):
        async with Service("test", structlog.get_logger()) as service:
            service.closes(close)
            await service.opens(failing_start, close)
    assert closed == ["store"]
