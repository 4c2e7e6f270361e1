"""Every client channel of the platform, and how it follows renewed certificate files.

grpc.aio fixes a channel's credentials when it is made: each reconnect would show the
certificate read at start, refused by every server once it expired. A RenewingChannel asks its
CertificateFiles (infra.tls_files) at each call; when they changed, calls from then on go over
a new channel made with the new files, and the old one is closed with a grace long enough for
the calls still on it (an answer streaming) to end as they would have.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import grpc

from infra.tls import TlsConfig
from infra.tls_files import CertificateFiles

# A channel left behind by a renewal closes once its calls are over, or after this long: above
# the longest answer a stream carries (generation caps at minutes), far below a certificate's
# lifetime, so at most one old channel per address is ever open.
RETIRED_CHANNEL_GRACE_S = 3600.0


class _Calls:
    """A stub's multicallable for one method: the current channel's, made again after a
    renewal (the stub keeps this object for its whole life)."""

    def __init__(
        self, owner: RenewingChannel, kind: str, method: str, args: tuple, kwargs: dict
    ) -> None:
        self._owner = owner
        self._kind = kind
        self._method = method
        self._args = args
        self._kwargs = kwargs
        self._channel: grpc.aio.Channel | None = None
        self._call: Callable[..., Any] | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        channel = self._owner.current()
        if channel is not self._channel or self._call is None:
            make = getattr(channel, self._kind)
            self._call = make(self._method, *self._args, **self._kwargs)
            self._channel = channel
        return self._call(*args, **kwargs)


class RenewingChannel(grpc.aio.Channel):
    """A secure channel to one address whose certificate files may be renewed."""

    def __init__(self, address: str, files: CertificateFiles, options: Sequence[tuple]) -> None:
        self._address = address
        self._files = files
        self._options = list(options)
        material = files.current()
        self._version = material.version
        self._channel = self._open(material.ca, material.key, material.cert)
        # Channels left behind by renewals, each closing in its own task.
        self._retired: dict[grpc.aio.Channel, asyncio.Task[None]] = {}

    def _open(self, ca: bytes, key: bytes, cert: bytes) -> grpc.aio.Channel:
        credentials = grpc.ssl_channel_credentials(ca, private_key=key, certificate_chain=cert)
        return grpc.aio.secure_channel(self._address, credentials, self._options)

    def current(self) -> grpc.aio.Channel:
        """The channel for a call starting now, a new one if the files changed."""
        material = self._files.current()
        if material.version != self._version:
            old, self._version = self._channel, material.version
            self._channel = self._open(material.ca, material.key, material.cert)
            task = asyncio.get_running_loop().create_task(old.close(RETIRED_CHANNEL_GRACE_S))
            self._retired[old] = task
            task.add_done_callback(lambda _: self._retired.pop(old, None))
        return self._channel

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Calls(self, "unary_unary", method, args, kwargs)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Calls(self, "unary_stream", method, args, kwargs)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Calls(self, "stream_unary", method, args, kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _Calls(self, "stream_stream", method, args, kwargs)

    def get_state(self, try_to_connect: bool = False) -> grpc.ChannelConnectivity:
        return self._channel.get_state(try_to_connect)

    async def wait_for_state_change(self, last_observed_state: grpc.ChannelConnectivity) -> None:
        await self._channel.wait_for_state_change(last_observed_state)

    async def channel_ready(self) -> None:
        await self.current().channel_ready()

    async def close(self, grace: float | None = None) -> None:
        # The retired channels' calls get the same grace as the current one's.
        retired = list(self._retired.items())
        for _, task in retired:
            task.cancel()
        await asyncio.gather(*(task for _, task in retired), return_exceptions=True)
        await asyncio.gather(*(old.close(grace) for old, _ in retired), self._channel.close(grace))

    async def __aenter__(self) -> RenewingChannel:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close(None)


def open_channel(
    address: str, tls: TlsConfig | None, options: Sequence[tuple[str, Any]] = ()
) -> grpc.aio.Channel:
    """Every client channel of the platform. None, or insecure, calls in plaintext."""
    if tls is not None:
        tls.check()
    if tls is None or tls.insecure:
        return grpc.aio.insecure_channel(address, list(options))
    return RenewingChannel(address, CertificateFiles(tls), options)
