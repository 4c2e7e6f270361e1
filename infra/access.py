"""Which certificate roles may call which gRPC methods: the one table, and the interceptor that
holds every TLS server to it before any servicer runs.

ACCESS below is the table (the most specific entry wins); README.md ("Mutual TLS between the
services") prints it for readers, and tests/infra/test_access_table.py holds the two together.

A method the table does not name is refused. The name check of ConnectNode needs the stream's
first message, so the scheduler's servicer makes it (infra.tls.peer gives it the name).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from infra.tls import Role, peer

ALL_ROLES = frozenset(Role)
# The most specific entry wins: a method's own, else its service's ("/<service>/*").
ACCESS: dict[str, frozenset[Role]] = {
    "/chat.v1.SchedulerService/ConnectNode": frozenset({Role.NODE}),
    "/chat.v1.SchedulerService/PickReplica": frozenset({Role.GATEWAY}),
    "/chat.v1.SchedulerService/PickReplicas": frozenset({Role.GATEWAY}),
    # Gateways follow the split through it; read-only, so it needs no admin token.
    "/chat.v1.SchedulerService/GetRollout": frozenset({Role.GATEWAY, Role.OPERATOR}),
    "/chat.v1.SchedulerService/*": frozenset({Role.OPERATOR}),
    "/chat.v1.UserService/*": frozenset({Role.OPERATOR}),
    "/chat.v1.PromptCaptureService/*": frozenset({Role.OPERATOR}),
    "/chat.v1.NodeService/*": frozenset({Role.GATEWAY}),
    # A gateway passes a message on to the gateway of the region that serves it.
    "/chat.v1.ChatService/*": frozenset({Role.EDGE, Role.CLIENT, Role.OPERATOR, Role.GATEWAY}),
    "/chat.v1.HomeService/*": frozenset({Role.GATEWAY}),
    # Internal: an edge's answer streams, many on one stream.
    "/chat.v1.EdgeLinkService/*": frozenset({Role.EDGE}),
    "/chat.v1.ReplayService/*": frozenset({Role.OPERATOR}),
    "/grpc.health.v1.Health/*": ALL_ROLES,
    "/grpc.reflection.v1alpha.ServerReflection/*": frozenset({Role.OPERATOR}),
}


def allowed_roles(method: str) -> frozenset[Role]:
    if method in ACCESS:
        return ACCESS[method]
    service = method.rsplit("/", 1)[0]
    return ACCESS.get(f"{service}/*", frozenset())


async def _admit(context: grpc.aio.ServicerContext, method: str, roles: frozenset[Role]) -> None:
    caller = peer(context)
    if caller is None or caller.role not in roles:
        role = caller.role if caller is not None and caller.role else "no role"
        await context.abort(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{method} does not take calls from {role} certificates",
        )


def _guard(behavior: Callable[..., Any], method: str, roles: frozenset[Role]) -> Any:
    # Streaming answers come either from an async generator or from a coroutine that writes
    # to the context (the health service's Watch): each is wrapped as what it is.
    if inspect.isasyncgenfunction(behavior):

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await _admit(context, method, roles)
            async for item in behavior(request, context):
                yield item

        return streaming

    async def once(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _admit(context, method, roles)
        return await behavior(request, context)

    return once


_HANDLER_KINDS = (
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("stream_unary", grpc.stream_unary_rpc_method_handler),
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
)


class RoleCheck(grpc.aio.ServerInterceptor):
    """Refuses with PERMISSION_DENIED a call whose certificate's role the table does not allow
    for its method; the servicer never sees it."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = await continuation(details)
        if handler is None:
            return None
        method = details.method
        roles = allowed_roles(method)
        for kind, make in _HANDLER_KINDS:
            behavior = getattr(handler, kind)
            if behavior is not None:
                return make(
                    _guard(behavior, method, roles),
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )
        return handler
