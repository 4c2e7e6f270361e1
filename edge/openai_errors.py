"""OpenAI's error shape (`{"error": {"message", "type", "param", "code"}}`), which its clients
parse: every refusal of the OpenAI-compatible API is one of these."""

from __future__ import annotations

from typing import Any

from aiohttp import web

ERROR_TYPES = {401: "invalid_request_error", 403: "permission_error", 429: "rate_limit_error"}


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
        headers = {"Retry-After": self.retry_after} if self.retry_after else None
        return web.json_response(self.body(), status=self.status, headers=headers)
