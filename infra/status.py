"""The one place where domain errors become gRPC statuses, and gRPC statuses become HTTP ones."""

from __future__ import annotations

import math

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from domain import errors

_CODES: list[tuple[type[errors.DomainError], grpc.StatusCode]] = [
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.Conflict, grpc.StatusCode.ABORTED),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.Unimplemented, grpc.StatusCode.UNIMPLEMENTED),
]

# Reasons carried in google.rpc.ErrorInfo where one gRPC code covers several HTTP answers.
REASON_MESSAGE_TOO_LARGE = "MESSAGE_TOO_LARGE"
REASON_NO_REPLICA = "NO_REPLICA"
_REASONS: list[tuple[type[errors.DomainError], str]] = [
    (errors.MessageTooLarge, REASON_MESSAGE_TOO_LARGE),
    (errors.NoReplica, REASON_NO_REPLICA),
]
ERROR_DOMAIN = "chat.v1"
MAX_RETRY_AFTER_S = 24 * 3600.0
# A reason travels twice in the trailers (grpc-message, percent-encoded, and inside
# grpc-status-details-bin), and gRPC clients refuse trailers past 16 KiB (past 8 KiB, some at
# random): a reason quoting a huge id reached the caller as RESOURCE_EXHAUSTED from its own
# transport, hiding the real status. 1 KiB of UTF-8 stays under 5 KiB of trailers.
MAX_REASON_BYTES = 1024

_HTTP: dict[grpc.StatusCode, int] = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNIMPLEMENTED: 501,
}
# The trailer a status with details travels in (grpc_status writes and reads it).
STATUS_TRAILER = "grpc-status-details-bin"


def grpc_code_of(error: errors.DomainError) -> grpc.StatusCode:
    for kind, code in _CODES:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


def bounded(reason: str) -> str:
    """The reason, cut (at a character) to MAX_REASON_BYTES of UTF-8 with an ellipsis."""
    encoded = reason.encode()
    if len(encoded) <= MAX_REASON_BYTES:
        return reason
    return encoded[: MAX_REASON_BYTES - 3].decode(errors="ignore") + "\u2026"


def to_rpc_status(error: errors.DomainError) -> grpc.Status:
    code = grpc_code_of(error)
    details: list[any_pb2.Any] = []
    retry_after_s = getattr(error, "retry_after_s", None)
    if retry_after_s is not None:
        # Never "infinity": a client must get a number it can wait for.
        seconds = min(max(0.0, retry_after_s), MAX_RETRY_AFTER_S)
        delay = duration_pb2.Duration(
            seconds=int(seconds), nanos=int((seconds - int(seconds)) * 1e9)
        )
        packed = any_pb2.Any()
        packed.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        details.append(packed)
    for kind, reason in _REASONS:
        if isinstance(error, kind):
            packed = any_pb2.Any()
            packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain=ERROR_DOMAIN))
            details.append(packed)
            break
    status = status_pb2.Status(code=code.value[0], message=bounded(error.reason), details=details)
    return rpc_status.to_status(status)


def google_code(code: grpc.StatusCode) -> int:
    return int(code.value[0]) if code.value[0] is not None else code_pb2.UNKNOWN


class CallFailure:
    """What a failed gRPC call told us, read once from its trailers."""

    def __init__(self, error: grpc.aio.AioRpcError) -> None:
        self.code = error.code()
        self.message = error.details() or self.code.name
        self.retry_after_s: float | None = None
        self.reason: str | None = None
        status = rpc_status.from_call(error)
        for detail in status.details if status else ():
            if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                info = error_details_pb2.RetryInfo()
                detail.Unpack(info)
                self.retry_after_s = info.retry_delay.seconds + info.retry_delay.nanos / 1e9
            elif detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                error_info = error_details_pb2.ErrorInfo()
                detail.Unpack(error_info)
                self.reason = error_info.reason

    @property
    def http_status(self) -> int:
        if self.reason == REASON_MESSAGE_TOO_LARGE:
            return 413
        return _HTTP.get(self.code, 502)

    @property
    def retry_after_header(self) -> str | None:
        if self.retry_after_s is None:
            return None
        return str(max(1, math.ceil(self.retry_after_s)))
