"""Renewed certificate files are used without a restart: a server shows its new certificate to
new connections, a client channel shows its new one on calls started after the renewal, and a
stream opened before goes on to its end. Real sockets, files renewed as kubelet does."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
from cryptography import x509
from prometheus_client import CollectorRegistry

from infra.certs import Authority
from infra.tls import Role
from infra.tls_channel import open_channel
from infra.tls_files import CertificateFiles, TlsExpiry, server_credentials
from tests.renewal import SecretVolume, peer_serial, replace, serial

WAIT_S = 10.0
EXPIRY = "chat_tls_certificate_expiry_timestamp_seconds"


def holder_files(authority: Authority, role: str, days: int = 365) -> dict[str, bytes]:
    cert, key = authority.issue(role, role, days=days)
    return {"ca.crt": authority.cert_pem, "tls.crt": cert, "tls.key": key}


async def until(check, want):  # type: ignore[no-untyped-def]
    """check()'s value once it is want, failing after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while (got := await check()) != want:
        assert time.monotonic() < deadline, f"still {got}, not {want}"
        await asyncio.sleep(0.02)
    return got


class Ticks:
    """A server stream the test paces: one message each time `release` gets one."""

    def __init__(self) -> None:
        self.release: asyncio.Queue[str] = asyncio.Queue()

    async def stream(self, _: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        while (tick := await self.release.get()) != "end":
            yield tick.encode()


async def who(_: bytes, context: grpc.aio.ServicerContext) -> bytes:
    """The serial of the certificate the caller showed on this call's connection."""
    (pem,) = context.auth_context()["x509_pem_cert"]
    return str(serial(pem)).encode()


async def test_renewed_files_are_shown_on_new_connections_and_a_stream_goes_on(
    tmp_path: Path,
) -> None:
    authority = Authority.create()
    served, calling = SecretVolume(tmp_path / "server"), SecretVolume(tmp_path / "client")
    first_server, first_client = (
        holder_files(authority, Role.GATEWAY),
        holder_files(authority, Role.EDGE),
    )
    served.write(first_server)
    calling.write(first_client)
    ticks = Ticks()
    server = grpc.aio.server()
    handlers = {
        "Ticks": grpc.unary_stream_rpc_method_handler(ticks.stream),
        "Who": grpc.unary_unary_rpc_method_handler(who),
    }
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("test.T", handlers)])
    port = server.add_secure_port("127.0.0.1:0", server_credentials(served.tls(0.05)))
    await server.start()
    address = f"127.0.0.1:{port}"
    channel = open_channel(address, calling.tls(0.05))
    try:
        stream = channel.unary_stream("/test.T/Ticks")(b"")
        ticks.release.put_nowait("before")
        assert await stream.read() == b"before"
        ask_who = channel.unary_unary("/test.T/Who")

        async def caller() -> int:
            return int(await ask_who(b"", timeout=WAIT_S))

        assert await caller() == serial(first_client["tls.crt"])
        assert await peer_serial(address, calling.tls(0.05)) == serial(first_server["tls.crt"])

        second_server = holder_files(authority, Role.GATEWAY)
        second_client = holder_files(authority, Role.EDGE)
        served.write(second_server)
        calling.write(second_client)

        await until(
            lambda: peer_serial(address, calling.tls(0.05)), serial(second_server["tls.crt"])
        )
        await until(caller, serial(second_client["tls.crt"]))
        # The stream opened before both renewals is still open, on its old connection.
        for tick in ("after", "end"):
            ticks.release.put_nowait(tick)
        assert [await stream.read(), await stream.read()] == [b"after", grpc.aio.EOF]
        assert await stream.code() == grpc.StatusCode.OK
    finally:
        await channel.close()
        await server.stop(0)


def test_a_half_written_renewal_keeps_the_old_pair_and_the_expiry_follows_the_new(
    tmp_path: Path,
) -> None:
    authority = Authority.create()
    tls = authority.save_holder(tmp_path, Role.NODE, "n1")
    authority.save(tmp_path)
    files = CertificateFiles(tls.__class__(tls.ca_file, tls.cert_file, tls.key_file,
                                           reload_check_s=0))  # fmt: skip
    registry = CollectorRegistry()
    registry.register(TlsExpiry("nodeagent", [files.tls]))
    first = files.current()
    labels = {"service": "nodeagent", "file": tls.cert_file}
    assert registry.get_sample_value(EXPIRY, labels) == first.cert_expiry

    cert, key = authority.issue(Role.NODE, "n1", days=30)
    replace(tls.cert_file, cert)
    # The new certificate beside the old key: not a pair, the loaded one stays.
    assert files.current() == first
    assert registry.get_sample_value(EXPIRY, labels) == first.cert_expiry

    replace(tls.key_file, key)
    renewed = files.current()
    assert (renewed.version, renewed.cert, renewed.key) == (1, cert, key)
    expiry = x509.load_pem_x509_certificate(cert).not_valid_after_utc.timestamp()
    assert renewed.cert_expiry == expiry
    assert registry.get_sample_value(EXPIRY, labels) == expiry
    ca_labels = {"service": "nodeagent", "file": tls.ca_file}
    ca_expiry = authority.cert.not_valid_after_utc.timestamp()
    assert registry.get_sample_value(EXPIRY, ca_labels) == ca_expiry
