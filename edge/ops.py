"""What operators configure at the edge: which web origins may call it (CORS), and how many
requests one client address may hold open at once."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable

from aiohttp import web

from edge.errors import HttpError
from edge.metrics import EdgeMetrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ALLOWED_METHODS = "GET, POST, PATCH, DELETE, OPTIONS"
ALLOWED_HEADERS = "Authorization, Content-Type, Idempotency-Key, Last-Event-ID, X-Session-Id"
# Without this a browser script could not read why it must wait, nor which replica and pool
# served.
EXPOSED_HEADERS = "Retry-After, X-Replica, X-Pool, X-Pool-Reason"
PREFLIGHT_MAX_AGE_S = "600"
# Probes and scrapes are never refused: an edge full of streams is still alive and measurable.
UNLIMITED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class Cors:
    """Cross-origin access for the origins listed; none by default, so only pages the edge
    serves itself (same origin) can call it from a browser."""

    def __init__(self, allowed_origins: tuple[str, ...]) -> None:
        self._allowed = frozenset(allowed_origins)

    def allows(self, origin: str) -> bool:
        return bool(origin) and (origin in self._allowed or "*" in self._allowed)

    @web.middleware
    async def preflight(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Answers a browser's OPTIONS preflight; other requests pass through."""
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return await handler(request)
        route_error = request.match_info.http_exception
        if route_error is not None and route_error.status == 404:
            return await handler(request)
        origin = request.headers.get("Origin", "")
        if not self.allows(origin):
            raise HttpError(403, f"the origin {origin!r} may not call this edge")
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": ALLOWED_METHODS,
                "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                "Access-Control-Max-Age": PREFLIGHT_MAX_AGE_S,
                "Vary": "Origin",
            },
        )

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """Marks every answer to an allowed origin, errors and streams included: headers go
        out when a response is prepared, before any handler or middleware returns."""
        origin = request.headers.get("Origin", "")
        if self.allows(origin):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
            response.headers.add("Vary", "Origin")


class PerAddressLimit:
    """At most `limit` requests open per client address (an SSE stream counts for as long as
    it is open), so one client cannot hold all of an edge's sockets; 0 turns it off. Behind a
    load balancer every client shares its address: raise the limit there, or turn it off."""

    def __init__(self, limit: int, metrics: EdgeMetrics) -> None:
        self._limit = limit
        self._metrics = metrics
        self._open: Counter[str] = Counter()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in UNLIMITED_PATHS:
            return await handler(request)
        address = request.remote or ""
        if self._limit and self._open[address] >= self._limit:
            self._metrics.refused_per_ip.inc()
            raise HttpError(
                429, f"this address already has {self._limit} requests open; close one", "1"
            )
        self._open[address] += 1
        self._metrics.open_requests.inc()
        try:
            return await handler(request)
        finally:
            self._metrics.open_requests.dec()
            self._open[address] -= 1
            if not self._open[address]:
                del self._open[address]  # the table holds only addresses with requests open
