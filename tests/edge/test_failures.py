"""Which failure messages reach users as they are: a gateway's own reasons do; gRPC's words,
and a reason quoting them, are told in the user's terms instead."""

from __future__ import annotations

import grpc
import pytest

from edge.failures import user_message

UNREACHABLE = (
    "the service could not reach a server it needs for this request (one that is down or "
    "restarting); try again in a few seconds"
)
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.3.7:50052: "
    "Failed to connect to remote host: Connection refused"
)


@pytest.mark.parametrize(
    ("code", "message", "own", "told"),
    [
        # The gateway's own refusals, meant for users.
        (grpc.StatusCode.UNAVAILABLE, "your home region 'c' is unavailable", True,
         "your home region 'c' is unavailable"),
        (grpc.StatusCode.INVALID_ARGUMENT, "'max_tokens': 0 is below 1", True,
         "'max_tokens': 0 is below 1"),
        # gRPC's own words, from this edge's call or passed on by a gateway.
        (grpc.StatusCode.UNAVAILABLE, REFUSED, False, UNREACHABLE),
        (grpc.StatusCode.UNAVAILABLE, "Socket closed", False, UNREACHABLE),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded", False,
         "the service took too long to answer; try again"),
        # A gateway's reason that quotes them.
        (grpc.StatusCode.UNAVAILABLE, f"home region 'c': UNAVAILABLE {REFUSED}", True,
         UNREACHABLE),
        (grpc.StatusCode.UNAVAILABLE, "no scheduler is reachable (gateway-0.sched:50051)", True,
         UNREACHABLE),
        (grpc.StatusCode.INTERNAL, "peer [fd00::7]:50052 reset", True,
         "the service failed while handling this request; try again"),
    ],
)  # fmt: skip
def test_what_a_user_is_told(code: grpc.StatusCode, message: str, own: bool, told: str) -> None:
    assert user_message(code, message, own) == told
