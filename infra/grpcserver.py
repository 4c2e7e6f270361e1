"""A gRPC server with health checking and reflection, and the error mapping for servicers."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from domain import errors
from infra.access import RoleCheck
from infra.decoding import DecodeCheck
from infra.keepalive import SERVER_KEEPALIVE
from infra.status import to_rpc_status
from infra.tls import TlsConfig
from infra.tls_files import server_credentials


def maps_domain_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """Turns a DomainError raised by a servicer method into its specific gRPC status."""
    if inspect.isasyncgenfunction(method):

        @functools.wraps(method)
        async def streaming(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                async for item in method(self, request, context):
                    yield item
            except errors.DomainError as error:
                await context.abort_with_status(to_rpc_status(error))

        return streaming

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            return await method(self, request, context)
        except errors.DomainError as error:
            await context.abort_with_status(to_rpc_status(error))

    return unary


# grpc.aio takes calls from gRPC's core one at a time, one per turn of the event loop; calls
# not yet taken wait in core's pending queue. Core cancels a call that waited there over 30 s
# and refuses calls at random past 1,000 waiting (RESOURCE_EXHAUSTED, all past 3,000). A burst
# of thousands of streams on a busy loop reaches both, and the client saw CANCELLED before
# its first event. Waiting calls cost core a few hundred bytes each: let them wait instead
# (docs/decisions.md, "Bursts of streams"). Keepalive: infra/keepalive.py.
SERVER_OPTIONS = [
    *SERVER_KEEPALIVE,
    ("grpc.server_max_unrequested_time_in_server", 600),
    ("grpc.server.max_pending_requests", 50_000),
    ("grpc.server.max_pending_requests_hard_limit", 100_000),
]


class GrpcServer:
    """Owns one grpc.aio server: its port, its health status and its graceful stop.

    With TLS (unless `tls` says insecure) callers need a certificate from the CA, and
    infra.access's table decides by its role which methods they may call. Kubernetes' gRPC
    probes show no certificate, so `health_listen`, when set, serves the health service alone,
    in plaintext, on a port of its own.
    """

    def __init__(
        self, listen: str, service_names: Iterable[str], *, tls: TlsConfig, health_listen: str = ""
    ) -> None:
        tls.check()
        self.server = grpc.aio.server(
            options=SERVER_OPTIONS,
            # The role check first: a caller the table refuses learns nothing of its request.
            interceptors=[DecodeCheck()] if tls.insecure else [RoleCheck(), DecodeCheck()],
        )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self._service_names = list(service_names)
        reflection.enable_server_reflection(
            [*self._service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], self.server
        )
        if tls.insecure:
            self.port = self.server.add_insecure_port(listen)
        else:
            self.port = self.server.add_secure_port(listen, server_credentials(tls))
        if self.port == 0:
            raise OSError(f"cannot listen on {listen}")
        self.host = listen.rsplit(":", 1)[0]
        self._health_server: grpc.aio.Server | None = None
        self.health_port = 0
        if health_listen:
            self._health_server = grpc.aio.server(interceptors=[DecodeCheck()])
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self._health_server)
            self.health_port = self._health_server.add_insecure_port(health_listen)
            if self.health_port == 0:
                raise OSError(f"cannot listen on {health_listen}")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def ready(self, extra: dict[str, Any]) -> dict[str, Any]:
        """What a ready file says of this server: its address, and its health port if any."""
        health_port = {"health": self.health_port} if self.health_port else {}
        return {"grpc": self.address, **health_port, **extra}

    async def start(self) -> None:
        await self.server.start()
        if self._health_server is not None:
            await self._health_server.start()

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ["", *self._service_names]:
            await self.health.set(name, status)

    async def stop(self, grace_s: float) -> None:
        # NOT_SERVING first so balancers stop sending new calls, then let running calls end.
        await self.set_serving(False)
        await self.server.stop(grace_s)
        if self._health_server is not None:
            await self._health_server.stop(0)
