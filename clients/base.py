"""What the platform's Python clients share (clients/chat_client.py's ChatClient, a user's;
clients/admin_client.py's AdminClient and clients/rollout_client.py's RolloutClient, an
operator's): one channel and one bearer token, unary calls that give up after a timeout, and
one exception type for every failure, `ClientError(code, message, retry_after_s)`."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self

import grpc
from google.protobuf import timestamp_pb2

from infra.status import CallFailure
from infra.tls import TlsConfig
from infra.tls_channel import open_channel

# Unary calls give up after this long, so a hung server never hangs a script.
DEFAULT_TIMEOUT_S = 10.0


def read_time(stamp: timestamp_pb2.Timestamp) -> datetime:
    return stamp.ToDatetime(tzinfo=UTC)


# Errors -----------------------------------------------------------------------------------------


class ClientError(Exception):
    """A call failed. code is the gRPC status name ("NOT_FOUND", "RESOURCE_EXHAUSTED"...);
    retry_after_s is set when the server said how long to wait (limits and shedding)."""

    def __init__(self, code: str, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retry_after_s = retry_after_s

    @classmethod
    def from_rpc(cls, error: grpc.aio.AioRpcError) -> ClientError:
        failure = CallFailure(error)
        return cls(failure.code.name, failure.message, failure.retry_after_s)

    def __str__(self) -> str:
        wait = f", retry in {self.retry_after_s:.0f} s" if self.retry_after_s is not None else ""
        return f"{self.message} ({self.code}{wait})"


# The shared plumbing ----------------------------------------------------------------------------


class Client:
    """One channel and one bearer token; unary calls turn gRPC errors into ClientError."""

    def __init__(self, address: str, token: str, timeout_s: float, tls: TlsConfig | None) -> None:
        if not address:
            raise ClientError("INVALID_ARGUMENT", "no address to call")
        self.address = address
        self._plaintext = tls is None or tls.insecure
        self._channel = open_channel(address, tls)
        self._metadata = (("authorization", f"Bearer {token}"),)
        self._timeout_s = timeout_s

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await self.close()

    async def _unary(self, method: Callable[..., Any], request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as error:
            raise self._failure(error) from None

    def _failure(self, error: grpc.aio.AioRpcError) -> ClientError:
        failure = ClientError.from_rpc(error)
        if failure.code == "UNAVAILABLE" and "connect" in failure.message:
            # grpc's text names no service; say which address was down.
            failure.message = f"cannot reach {self.address}: {failure.message}"
            if self._plaintext:
                # A TLS server just closes the socket on a plaintext caller: say why it may.
                failure.message += (
                    " (called in plaintext, which a platform with mutual TLS refuses)"
                )
        return failure
