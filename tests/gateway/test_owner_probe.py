"""Whether a run's owner is gone, asked of the address it serves on: only a refused connection
says so; a listening port, an address that cannot be reached or a timeout say nothing."""

from __future__ import annotations

import asyncio

from gateway.owner_probe import advertised, reachable_from, refuses_connections


def test_a_wildcard_listen_address_is_not_advertised() -> None:
    assert [advertised(a) for a in ("0.0.0.0:50052", "[::]:50052", ":50052")] == ["", "", ""]
    assert advertised("10.0.0.5:50052") == "10.0.0.5:50052"
    assert advertised("127.0.0.1:41234") == "127.0.0.1:41234"


def test_a_loopback_owner_is_probed_only_from_loopback() -> None:
    assert reachable_from("127.0.0.1:5", "127.0.0.1:6")
    assert reachable_from("[::1]:5", "localhost:6")
    assert not reachable_from("127.0.0.1:5", "10.0.0.2:6")
    assert reachable_from("10.0.0.1:5", "127.0.0.1:6")
    assert reachable_from("gateway-1.gateways:50052", "10.0.0.2:6")


async def test_only_a_refused_connection_says_the_owner_is_gone() -> None:
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    assert not await refuses_connections(f"127.0.0.1:{port}")
    server.close()
    await server.wait_closed()
    assert await refuses_connections(f"127.0.0.1:{port}")
    # Not reachable, or no answer in time: nothing is known, so nothing is concluded.
    assert not await refuses_connections("10.255.255.1:9", timeout_s=0.2)
    assert not await refuses_connections("no-such-host.invalid:9", timeout_s=0.5)
    assert not await refuses_connections("not an address")
