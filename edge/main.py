"""The edge's composition root."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry

from edge.app import EdgeSettings, build_app
from infra.logs import configure_logging
from infra.runner import run_service, write_ready_file
from infra.tls import TlsConfig, open_channel


@dataclass
class EdgeConfig:
    listen: str = "127.0.0.1:8080"
    gateway_address: str = "127.0.0.1:50052"
    # The CA, the edge's certificate and key for calling gateways (infra.tls), or
    # insecure: true. Only the gRPC side: browsers and apps speak HTTP to the edge.
    tls: TlsConfig = field(default_factory=TlsConfig)
    max_body_bytes: int = 64 * 1024
    # One header line, and how many headers; over either is answered 400 before any handler.
    max_header_bytes: int = 8190
    max_headers: int = 64
    # Web origins (scheme://host[:port]) allowed to call cross-origin, "*" for any; none by
    # default, so only the page the edge serves itself can call it from a browser.
    cors_origins: list[str] = field(default_factory=list)
    # Requests (SSE streams included) one client address may hold open; 0 turns it off.
    max_requests_per_ip: int = 256
    keepalive_s: float = 15.0
    shutdown_grace_s: float = 10.0
    ready_file: str = ""
    log_level: str = "info"


async def serve(config: EdgeConfig, stop: asyncio.Event) -> None:
    log = configure_logging("edge", config.log_level)
    channel = open_channel(config.gateway_address, config.tls)
    settings = EdgeSettings(
        max_body_bytes=config.max_body_bytes,
        keepalive_s=config.keepalive_s,
        cors_origins=tuple(config.cors_origins),
        max_requests_per_ip=config.max_requests_per_ip,
    )
    app = build_app(channel, settings, CollectorRegistry())
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=config.shutdown_grace_s,
        max_line_size=config.max_header_bytes,
        max_field_size=config.max_header_bytes,
        max_headers=config.max_headers,
    )
    await runner.setup()
    host, port = config.listen.rsplit(":", 1)
    await web.TCPSite(runner, host, int(port)).start()
    bound = runner.addresses[0][1]
    write_ready_file(config.ready_file, {"http": f"http://{host}:{bound}"})
    log.info("edge ready", url=f"http://{host}:{bound}")
    await stop.wait()
    # Open streams end here; apps resume them on any edge with Last-Event-ID.
    await runner.cleanup()
    await channel.close()
    log.info("edge stopped")


def main() -> None:
    run_service(EdgeConfig, "edge", serve, "HTTP and server-sent events in front of gateways")


if __name__ == "__main__":
    main()
