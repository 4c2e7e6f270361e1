"""OpenAI's error shape (`{"error": {"message", "type", "param", "code"}}`), which its clients
parse: every refusal of the OpenAI-compatible API is one of these."""

from __future__ import annotations

from typing import Any

from aiohttp import web

ERROR_TYPES = {401: "invalid_request_error", 403: "permission_error", 429: "rate_limit_error"}
# Retry-After of a 503 that names no wait of its own: about how long a lost server takes to be
# passed over (an edge's gateway_cooldown_s; a region is seen out 6 s after its last word).
RETRY_UNAVAILABLE_S = 5


class OpenAIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        param: str | None = None,
        retry_after: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        kind = ERROR_TYPES.get(self.status)
        if kind is None:
            kind = "server_error" if self.status >= 500 else "invalid_request_error"
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }

    def response(self) -> web.Response:
        retry_after = self.retry_after
        if self.status == 503 and not retry_after:
            retry_after = str(RETRY_UNAVAILABLE_S)
        headers = {"Retry-After": retry_after} if retry_after else None
        return web.json_response(self.body(), status=self.status, headers=headers)
