"""A Prometheus /metrics endpoint on its own port, for services that speak only gRPC."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


def metrics_handler(
    registry: CollectorRegistry,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return handle


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, listen: str) -> None:
        self._app = web.Application()
        self._app.router.add_get("/metrics", metrics_handler(registry))
        self._runner = web.AppRunner(self._app, access_log=None)
        self._host, port = listen.rsplit(":", 1)
        self._port = int(port)
        self.port = 0

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        await self._runner.cleanup()
