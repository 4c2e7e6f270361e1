"""OpenAI's Files API over ChatService's file calls: `POST /v1/files` (multipart: `file` and
`purpose`), `GET /v1/files`, `GET /v1/files/{id}`, `GET /v1/files/{id}/content` and
`DELETE /v1/files/{id}`. A file is what the file_search tool searches (gateway/files.py);
errors come in OpenAI's shape, as the rest of its API's do.

The upload is read here up to `max_file_bytes`, a limit of its own: the edge's body limit is
sized for JSON messages, far below a document's."""

from __future__ import annotations

import re
from typing import Any

from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from chat.v1 import chat_service_pb2 as pb
from edge.gateways import Gateways, never_sent
from edge.openai_api import OpenAIError, bearer, openai_errors

FILE_ID = re.compile(r"file-[A-Za-z0-9]{1,59}")
UPLOAD_PARTS = frozenset({"file", "purpose"})


def _not_found(file_id: str) -> OpenAIError:
    return OpenAIError(404, f"no file {file_id[:80]!r}", "not_found", None)


def _file_id(request: web.Request) -> str:
    file_id = request.match_info["file_id"]
    if not FILE_ID.fullmatch(file_id):
        raise _not_found(file_id)
    return file_id


def file_json(f: pb.File) -> dict[str, Any]:
    return {
        "id": f.file_id,
        "object": "file",
        "bytes": f.bytes,
        "created_at": f.created_at.seconds,
        "filename": f.filename,
        "purpose": f.purpose,
        # Cut into passages and indexed before the upload is answered.
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }


async def _read_limited(part: BodyPartReader, limit: int) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk():
        data.extend(chunk)
        if len(data) > limit:
            raise OpenAIError(413, f"the file is over {limit} bytes", "file_too_large", "file")
    return bytes(data)


class FilesApi:
    def __init__(self, gateways: Gateways, rpc_timeout_s: float, max_file_bytes: int) -> None:
        self._gateways = gateways
        self._rpc_timeout_s = rpc_timeout_s
        self._max_file_bytes = max_file_bytes

    def register(self, app: web.Application) -> None:
        app.router.add_post("/v1/files", self.upload)
        app.router.add_get("/v1/files", self.list)
        app.router.add_get("/v1/files/{file_id}", self.retrieve)
        app.router.add_get("/v1/files/{file_id}/content", self.content)
        app.router.add_delete("/v1/files/{file_id}", self.delete)

    @openai_errors
    async def upload(self, request: web.Request) -> web.Response:
        metadata, timeout = bearer(request), self._rpc_timeout_s
        ask = await self._upload_request(request)
        # Sent once: a second try at another gateway could keep the file twice.
        reply = await self._gateways.call(
            lambda chat: chat.UploadFile(ask, metadata=metadata, timeout=timeout), never_sent
        )
        return web.json_response(file_json(reply.file))

    @openai_errors
    async def list(self, request: web.Request) -> web.Response:
        metadata, timeout = bearer(request), self._rpc_timeout_s
        ask = pb.ListFilesRequest()
        reply = await self._gateways.call(
            lambda chat: chat.ListFiles(ask, metadata=metadata, timeout=timeout)
        )
        files = [file_json(f) for f in reply.files]
        return web.json_response({"object": "list", "data": files, "has_more": False,
                                  "first_id": files[0]["id"] if files else None,
                                  "last_id": files[-1]["id"] if files else None})  # fmt: skip

    @openai_errors
    async def retrieve(self, request: web.Request) -> web.Response:
        metadata, timeout = bearer(request), self._rpc_timeout_s
        ask = pb.GetFileRequest(file_id=_file_id(request))
        reply = await self._gateways.call(
            lambda chat: chat.GetFile(ask, metadata=metadata, timeout=timeout)
        )
        return web.json_response(file_json(reply.file))

    @openai_errors
    async def content(self, request: web.Request) -> web.Response:
        metadata, timeout = bearer(request), self._rpc_timeout_s
        ask = pb.GetFileContentRequest(file_id=_file_id(request))
        reply = await self._gateways.call(
            lambda chat: chat.GetFileContent(ask, metadata=metadata, timeout=timeout)
        )
        return web.Response(body=reply.content, content_type="text/plain", charset="utf-8")

    @openai_errors
    async def delete(self, request: web.Request) -> web.Response:
        metadata, timeout = bearer(request), self._rpc_timeout_s
        file_id = _file_id(request)
        ask = pb.DeleteFileRequest(file_id=file_id)
        await self._gateways.call(
            lambda chat: chat.DeleteFile(ask, metadata=metadata, timeout=timeout), never_sent
        )
        return web.json_response({"id": file_id, "object": "file", "deleted": True})

    async def _upload_request(self, request: web.Request) -> pb.UploadFileRequest:
        if not request.content_type.startswith("multipart/form-data"):
            raise OpenAIError(400, "upload a file as multipart/form-data with the parts 'file' "
                              "and 'purpose'")  # fmt: skip
        try:
            return await self._read_form(request)
        except (HttpProcessingError, ValueError) as malformed:
            # aiohttp's reader raises these for a part's bad headers or encoding.
            raise OpenAIError(400, f"the form is malformed: {str(malformed)[:200]}") from malformed

    async def _read_form(self, request: web.Request) -> pb.UploadFileRequest:
        reader = await request.multipart()
        filename, purpose, content = None, None, None
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader) or part.name not in UPLOAD_PARTS:
                name = getattr(part, "name", None)
                raise OpenAIError(400, f"unrecognized request argument supplied: {name}", None,
                                  name)  # fmt: skip
            if part.name == "purpose":
                purpose = (await _read_limited(part, 64)).decode("utf-8", "replace")
            else:
                filename = part.filename or ""
                content = await _read_limited(part, self._max_file_bytes)
        if content is None:
            raise OpenAIError(400, "'file' is required", None, "file")
        if purpose is None:
            raise OpenAIError(400, "'purpose' is required", None, "purpose")
        return pb.UploadFileRequest(filename=filename or "", purpose=purpose, content=content)
