"""Whether the gateway that owns a run is gone, asked of its address rather than its liveness.

A gateway killed outright leaves its liveness key in Redis for up to its liveness window (2 s),
and its runs wait that long to be taken over. Its port, though, refuses connections at once. A
gateway serves gRPC until every run it owns has ended (gateway/main.py closes the server after
the drain), so a connection refused at the address its liveness names means it is gone.
Anything else (a connection made, a timeout, a host that cannot be reached) proves nothing,
and the liveness key decides as before.
"""

from __future__ import annotations

import asyncio
import contextlib

# A refusal comes back within a round trip; waiting longer only delays the run's readers.
PROBE_TIMEOUT_S = 0.5
_LOOPBACK = ("127.", "localhost", "::1")
_WILDCARD = ("", "0.0.0.0", "::")


def host_of(address: str) -> str:
    return address.rpartition(":")[0].strip("[]")


def advertised(address: str) -> str:
    """What a gateway serving on address tells the others; '' for a wildcard listen address,
    which names no host another gateway could reach."""
    return "" if host_of(address) in _WILDCARD else address


def reachable_from(owner_address: str, own_address: str) -> bool:
    """Whether own_address's gateway can probe owner_address: a loopback address names the
    same machine only to a gateway that serves on loopback itself."""
    on_loopback = host_of(owner_address).startswith(_LOOPBACK)
    return not on_loopback or host_of(own_address).startswith(_LOOPBACK)


async def refuses_connections(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    host, _, port = address.rpartition(":")
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host.strip("[]"), int(port))
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False
