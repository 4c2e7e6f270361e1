"""The edge's composition root."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry

from edge.app import EdgeSettings, build_app
from edge.gateways import Gateways
from edge.workers import EdgeWorkers
from infra.config import ConfigError
from infra.logs import configure_logging
from infra.runner import run_service
from infra.service import Service
from infra.tls import TlsConfig
from infra.tls_files import TlsExpiry


@dataclass
class EdgeConfig:
    listen: str = "127.0.0.1:8080"
    # Where /metrics is served, apart from the public port (Prometheus reaches it, the
    # internet does not); empty: /metrics on `listen`, as one machine's `chatctl up` has it.
    metrics_listen: str = ""
    # The gateways to call: gateway_addresses when set, else gateway_address alone. Each call
    # goes to the next one not marked down; a stream whose gateway goes away carries on
    # through another. An address may also be a DNS name resolving to several gateways.
    gateway_address: str = "127.0.0.1:50052"
    # The CA, the edge's certificate and key for calling gateways (infra.tls), or
    # insecure: true. Only the gRPC side: browsers and apps speak HTTP to the edge.
    tls: TlsConfig = field(default_factory=TlsConfig)
    gateway_addresses: list[str] = field(default_factory=list)
    # A gateway whose call was lost gets no calls for this long (unless every one is down).
    gateway_cooldown_s: float = 5.0
    # A call whose gateways were all lost waits this long for one to connect (a restarted
    # gateway the edge is still backing off from) before it is refused.
    gateway_reconnect_wait_s: float = 3.0
    # Answer streams go to each gateway address over this many EdgeLinkService streams, each
    # frame carrying every answer's news (edge/gateway_link.py); 0: a gRPC call per answer.
    # Where one address names several gateways, give at least as many links as gateways:
    # each link goes to one of them, and a link takes no new streams once gateway_link_max_age_s
    # old, so that links move onto gateways added since.
    gateway_links: int = 1
    gateway_link_max_age_s: float = 60.0
    # How long a stream whose gateway went away may take to carry on through another one
    # before the client is sent an error event.
    reattach_timeout_s: float = 10.0
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
    # Processes serving HTTP on `listen`, the kernel spreading connections across them
    # (SO_REUSEPORT): more than 1 makes this process their supervisor (edge/workers.py).
    workers: int = 1
    # Binds `listen` with SO_REUSEPORT, so that other edges may bind it too (the workers do).
    reuse_port: bool = False
    ready_file: str = ""
    log_level: str = "info"


async def serve(config: EdgeConfig, stop: asyncio.Event) -> None:
    if config.workers < 1:
        raise ConfigError(f"workers must be at least 1, not {config.workers}")
    if config.workers > 1 and config.metrics_listen:
        # Each worker has its own counters: one metrics port cannot serve them all.
        raise ConfigError("metrics_listen needs workers: 1 (each worker counts on its own)")
    if config.workers > 1:
        configure_logging("edge", config.log_level)
        workers = EdgeWorkers(config.workers, config.listen, config.shutdown_grace_s)
        await workers.serve(stop, config.ready_file)
        return
    await serve_one(config, stop)


async def serve_one(config: EdgeConfig, stop: asyncio.Event) -> None:
    log = configure_logging("edge", config.log_level)
    addresses = [a.strip() for a in config.gateway_addresses if a.strip()]
    async with Service("edge", log) as service:
        gateways = Gateways.dial(
            addresses or [config.gateway_address],
            config.tls,
            config.gateway_cooldown_s,
            config.gateway_reconnect_wait_s,
            config.gateway_links,
            config.gateway_link_max_age_s,
        )
        service.closes(gateways.close)
        settings = EdgeSettings(
            max_body_bytes=config.max_body_bytes,
            keepalive_s=config.keepalive_s,
            cors_origins=tuple(config.cors_origins),
            max_requests_per_ip=config.max_requests_per_ip,
            reattach_timeout_s=config.reattach_timeout_s,
            metrics_on_http=not config.metrics_listen,
        )
        registry = CollectorRegistry()
        registry.register(TlsExpiry("edge", [config.tls]))
        runner = web.AppRunner(
            build_app(gateways, settings, registry),
            access_log=None,
            shutdown_timeout=config.shutdown_grace_s,
            max_line_size=config.max_header_bytes,
            max_field_size=config.max_header_bytes,
            max_headers=config.max_headers,
        )
        # Open streams end at the cleanup; apps resume them on any edge with Last-Event-ID.
        await service.opens(runner.setup, runner.cleanup)
        host, port = config.listen.rsplit(":", 1)
        await web.TCPSite(runner, host, int(port), reuse_port=config.reuse_port or None).start()
        url = f"http://{host}:{runner.addresses[0][1]}"
        ready: dict[str, object] = {"http": url}
        if config.metrics_listen:
            metrics = await service.metrics(registry, config.metrics_listen)
            ready["metrics"] = metrics.port
        await service.serve(stop, config.ready_file, ready, url=url)


def main() -> None:
    run_service(EdgeConfig, "edge", serve, "HTTP and server-sent events in front of gateways")


if __name__ == "__main__":
    main()
