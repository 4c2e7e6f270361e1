"""One service's start and stop, the same for every service: open what it needs, start its
servers and background tasks, say it serves, wait for the stop, drain, cancel the tasks and
close everything in the reverse order it was opened. A service's `serve()` only composes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Self

import structlog
from prometheus_client import CollectorRegistry

from infra.grpcserver import GrpcServer
from infra.metrics import MetricsServer
from infra.runner import write_ready_file

Step = Callable[[], Awaitable[object]]
# Calls still open on a gRPC server once the drains are over (re-attaches, admin calls, node
# streams) get this long to end before they are cut.
SERVER_STOP_GRACE_S = 2.0


class Service:
    """Used as `async with Service(name, log) as service:`; every close registered runs on the
    way out, newest first, also when the start failed half-way.

    After the stop: the gRPC servers say NOT_SERVING (balancers stop sending new calls), the
    drains run in the order given (running answers finish and are saved), the background
    tasks are cancelled, then the closes run, newest first: a server started after the
    resources it serves stops before them."""

    def __init__(self, name: str, log: structlog.stdlib.BoundLogger) -> None:
        self.name = name
        self.log = log
        self._closes = contextlib.AsyncExitStack()
        self._servers: list[GrpcServer] = []
        self._drains: list[Step] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self._cancel_tasks()
        await self._closes.aclose()
        if error is None:
            self.log.info(f"{self.name} stopped")

    def closes(self, close: Step) -> None:
        """Runs close at the end, before what was registered earlier."""
        self._closes.push_async_callback(close)

    async def opens(self, start: Step, stop: Step) -> None:
        """Starts something now and stops it at the end."""
        await start()
        self.closes(stop)

    async def grpc(self, server: GrpcServer) -> GrpcServer:
        """Starts a gRPC server; it says SERVING once the service is ready."""
        await server.start()
        self.closes(lambda: server.stop(grace_s=SERVER_STOP_GRACE_S))
        self._servers.append(server)
        return server

    async def metrics(self, registry: CollectorRegistry, listen: str) -> MetricsServer:
        """The Prometheus endpoint of a service that speaks only gRPC, started."""
        server = MetricsServer(registry, listen)
        await self.opens(server.start, server.stop)
        return server

    def task(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Background work that runs while the service serves; cancelled after the drains."""
        self._tasks.append(asyncio.create_task(work, name=name))

    def drains(self, step: Step) -> None:
        """A step of the graceful stop, run after NOT_SERVING and before anything closes."""
        self._drains.append(step)

    async def serve(
        self, stop: asyncio.Event, ready_file: str, ready: dict[str, Any], **logged: Any
    ) -> None:
        """Says SERVING, writes the ready file, waits for `stop`, then drains."""
        for server in self._servers:
            await server.set_serving(True)
        write_ready_file(ready_file, ready)
        self.log.info(f"{self.name} ready", **logged)
        await stop.wait()
        for server in self._servers:
            await server.set_serving(False)
        for step in self._drains:
            await step()

    async def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
