"""The image's health check: exit 0 when the role answers SERVING on its gRPC health service
(grpc://HOST:PORT), or 200 on an HTTP URL (the edge's /healthz); 1 otherwise, with the reason.

    CHAT_HEALTHCHECK=grpc://127.0.0.1:9113 python healthcheck.py
"""

from __future__ import annotations

import os
import sys
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

TIMEOUT_S = 2.0


def grpc_serving(address: str) -> str:
    """Empty when SERVING, else why not. The health port is plaintext (health_listen)."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S
            )
        except grpc.RpcError as error:
            return f"{address}: {error.code().name}"
    if reply.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{address}: {health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)}"
    return ""


def http_ok(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
            return "" if response.status == 200 else f"{url}: HTTP {response.status}"
    except OSError as error:
        return f"{url}: {error}"


def main() -> int:
    target = os.environ.get("CHAT_HEALTHCHECK", "grpc://127.0.0.1:9111")
    if target.startswith("grpc://"):
        problem = grpc_serving(target.removeprefix("grpc://"))
    elif target.startswith(("http://", "https://")):
        problem = http_ok(target)
    else:
        problem = f"CHAT_HEALTHCHECK must be grpc://HOST:PORT or an http URL, not {target!r}"
    if problem:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
