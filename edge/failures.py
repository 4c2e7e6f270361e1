"""What a failed call may tell a user. A gateway's own refusals ("your home region 'c' is
unavailable; ...") are meant for users and pass as they are; what gRPC itself says when a
connection fails ("failed to connect to all addresses; last error: UNKNOWN:
ipv4:10.0.3.7:50052: Connection refused"), whether the edge's own call or a gateway passing
on another region's, names internal addresses and means nothing to a user. Such a message is
logged, with its addresses, and the user is told what happened in their terms."""

from __future__ import annotations

import re

import grpc
import structlog

from infra.status import STATUS_TRAILER, CallFailure

# host:port (an IPv4 or IPv6 address, or a name), a gRPC target scheme, or a gRPC status name:
# gRPC's own words, or a gateway's reason quoting them.
_INTERNAL = re.compile(
    r"\b(?:ipv4|ipv6|unix|dns):"
    r"|\[[0-9A-Fa-f:.]+\]:\d+"
    r"|\b[\w.-]+:\d{2,5}\b"
    r"|\b(?:UNAVAILABLE|DEADLINE_EXCEEDED|CANCELLED|UNKNOWN|INTERNAL|RESOURCE_EXHAUSTED)\b"
)
# Codes a call also fails with when nobody answered it: without a gateway's status in the
# trailers, their text is gRPC's.
_TRANSPORT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    }
)
_USER_TERMS = {
    grpc.StatusCode.UNAVAILABLE: "the service could not reach a server it needs for this "
    "request (one that is down or restarting); try again in a few seconds",
    grpc.StatusCode.DEADLINE_EXCEEDED: "the service took too long to answer; try again",
    grpc.StatusCode.CANCELLED: "the request was cancelled before it was answered",
}
_FAILED = "the service failed while handling this request; try again"


def internal(message: str) -> bool:
    """Whether a message names an address or quotes gRPC's status names."""
    return _INTERNAL.search(message) is not None


def user_message(code: grpc.StatusCode, message: str, own: bool = True) -> str:
    """message, or, when it is gRPC's own text (own False: no gateway wrote it) or names
    internal addresses, what happened in the user's terms, the original logged."""
    if (own or code not in _TRANSPORT) and not internal(message):
        return message
    structlog.get_logger(component="edge").warning("call failed", code=code.name, details=message)
    return _USER_TERMS.get(code, _FAILED)


def user_message_of_code(code: int, message: str) -> str:
    """user_message for an error event's numeric code (google.rpc.Code)."""
    named = next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    return user_message(named, message)


def failure_of(error: grpc.aio.AioRpcError) -> CallFailure:
    """The call's failure, its message fit for the user."""
    failure = CallFailure(error)
    trailers = error.trailing_metadata() or ()
    own = any(key == STATUS_TRAILER for key, _ in trailers)
    failure.message = user_message(failure.code, failure.message, own)
    return failure
