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

# How often a server pings its callers. Callers ping every KEEPALIVE_TIME_MS, so a silent
# link is noticed on the side that waits on it (the edge for its gateway, the gateway for its
# node and scheduler, the node for its scheduler); a server's own pings only tell it that a
# caller is gone, which nothing waits on: a scheduler drops a silent node after its report
# timeout (2 s), and a node's run outlives its gateway's stream for a takeover anyway. At a
# ping a second on both ends the pings were half of an idle platform's CPU (docs/decisions.md,
# "Keepalive: a silent link is noticed within 3 s").
SERVER_PING_MS = 10_000

# For every server: it pings its callers (a vanished caller's streams are freed within about
# 12 s) and accepts their pings every second.
SERVER_KEEPALIVE: tuple[tuple[str, Any], ...] = (
    ("grpc.keepalive_time_ms", SERVER_PING_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    # The least time between two pings a server accepts from a caller that sends no data (gRPC
    # core's name for it, despite "without_data"; a server's own pings go by keepalive_time_ms).
    # Half the callers' interval, so timer jitter never makes a ping look too soon: callers
    # ping every second, and the third ping taken as too soon closes the connection
    # (too_many_pings).
    ("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2),
)


def never_connected(error: grpc.aio.AioRpcError) -> bool:
    """The call found no connection to its peer, so the peer never saw it (gRPC's words for
    it): safe to send elsewhere even when it changes something."""
    details = (error.details() or "").lower()
    return error.code() == grpc.StatusCode.UNAVAILABLE and "failed to connect" in details
