"""HTTP errors before the first byte: one JSON shape for the conversation API, and OpenAI's
shape on the OpenAI-compatible paths, whose clients parse that one."""

from __future__ import annotations

import grpc
from aiohttp import web

from edge.failures import failure_of
from edge.openai_api import OpenAIError
from edge.openai_errors import RETRY_UNAVAILABLE_S

OPENAI_PATHS = ("/v1/chat/", "/v1/models", "/v1/responses")


class HttpError(Exception):
    def __init__(self, status: int, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


def from_rpc(error: grpc.aio.AioRpcError) -> HttpError:
    failure = failure_of(error)
    return HttpError(failure.http_status, failure.message, failure.retry_after_header)


def error_response(status: int, message: str, retry_after: str | None = None) -> web.Response:
    if status == 503 and not retry_after:
        retry_after = str(RETRY_UNAVAILABLE_S)
    headers = {"Retry-After": retry_after} if retry_after else None
    body = {"error": {"status": status, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def error_for(request: web.Request, error: HttpError) -> web.Response:
    if request.path.startswith(OPENAI_PATHS):
        codes = {413: "request_too_large", 429: "rate_limit_exceeded"}
        shaped = OpenAIError(
            error.status, error.message, codes.get(error.status), None, error.retry_after
        )
        return shaped.response()
    return error_response(error.status, error.message, error.retry_after)
