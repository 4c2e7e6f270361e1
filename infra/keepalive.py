"""gRPC keepalive on every connection an answer crosses (edge -> gateway, gateway -> scheduler
and node, node -> scheduler), so that a peer behind a silent link is noticed within
SILENCE_NOTICED_S.

A partition, a host that lost power or a cable pulled sends no FIN and no RST: without pings,
a stream whose peer vanished that way waits for TCP's retransmissions (minutes), and an answer
waited for the gateway's stall timeout (10 s) before it failed over. With a ping every
second and 1.5 s for its answer, the connection is closed and its calls fail with UNAVAILABLE
within 1.5-2.5 s of the link going silent (docs/decisions.md, "Keepalive: a silent link is
noticed within 3 s").

Servers must let these pings in: gRPC's default allows one every five minutes when the server
sends no data (a load report stream's scheduler sends almost none), and after two pings sooner
than that it closes the connection with ENHANCE_YOUR_CALM (too_many_pings).
"""

from __future__ import annotations

from typing import Any

import grpc

KEEPALIVE_TIME_MS = 1_000
# Half a second more than the ping interval: a peer on a starved machine (two cores shared by a
# whole platform in the tests) still answers in time, and nothing is failed over for nothing.
KEEPALIVE_TIMEOUT_MS = 1_500
# The bound callers are held to: a ping is due at most KEEPALIVE_TIME_MS after the link went
# silent, and its answer is waited for KEEPALIVE_TIMEOUT_MS; the rest is timer slack.
SILENCE_NOTICED_S = 3.0

# For every client channel on an answer's path.
CLIENT_KEEPALIVE: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # gRPC core (1.6x on) waits for a ping's answer this long, keepalive_timeout_ms or not
    # (60 s by default): without it a silent link was noticed after a minute.
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # An idle channel is watched too: a gateway the edge has not called for a while is known
    # to be gone before a user's call is sent to it.
    ("grpc.keepalive_permit_without_calls", 1),
    # gRPC stops pinging after two pings with no data sent by this side (the default), and a
    # Generate or report stream sends none for long stretches: keep pinging.
    ("grpc.http2.max_pings_without_data", 0),
)

# For every client channel too: a peer that comes back (a restarted node, scheduler or
# gateway) is connected again within about RECONNECT_BACKOFF_MAX_MS (plus gRPC's 20 % jitter).
# gRPC's default backoff grows to 120 s, and while a channel waits it out every call on it
# fails at once, although the peer is up again.
RECONNECT_BACKOFF_MAX_MS = 2_000
CLIENT_RECONNECT: tuple[tuple[str, Any], ...] = (
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
)
CLIENT_CHANNEL = CLIENT_KEEPALIVE + CLIENT_RECONNECT

# For every server: it pings its callers on the same schedule (a scheduler notices a node's
# stream gone, a node a gateway's), and accepts their pings.
SERVER_KEEPALIVE: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # Half the clients' interval: timer jitter never makes a ping look too soon.
    ("grpc.http2.min_recv_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS),
)


def never_connected(error: grpc.aio.AioRpcError) -> bool:
    """The call found no connection to its peer, so the peer never saw it (gRPC's words for
    it): safe to send elsewhere even when it changes something."""
    details = (error.details() or "").lower()
    return error.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect" in details
