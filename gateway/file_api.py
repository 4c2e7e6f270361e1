"""ChatService's file calls, translated: protobuf in and out, the work done by the gateway's
FileDesk (gateway/files.py). A user's files are kept at their home region; this gateway
serves them only for users at home here (they are not copied between regions, and a search
from another region would find none)."""

from __future__ import annotations

from chat.v1 import chat_service_pb2 as pb
from domain.errors import FailedPrecondition
from domain.types import User
from gateway.convert import timestamp_pb
from gateway.files import FileDesk
from gateway.histories import Homes
from gateway.ids import check_id
from store.records import FileRecord


def file_to_pb(record: FileRecord) -> pb.File:
    return pb.File(file_id=record.file_id, filename=record.filename, purpose=record.purpose,
                   bytes=record.bytes, passages=record.passages,
                   created_at=timestamp_pb(record.created_at))  # fmt: skip


class FileApi:
    def __init__(self, desk: FileDesk | None, homes: Homes) -> None:
        self._desk = desk
        self._homes = homes

    async def upload(self, user: User, request: pb.UploadFileRequest) -> pb.UploadFileResponse:
        desk = await self._desk_for(user)
        record = await desk.upload(user, request.filename, request.purpose, request.content)
        return pb.UploadFileResponse(file=file_to_pb(record))

    async def list(self, user: User) -> pb.ListFilesResponse:
        records = await (await self._desk_for(user)).listed(user)
        return pb.ListFilesResponse(files=[file_to_pb(r) for r in records])

    async def get(self, user: User, request: pb.GetFileRequest) -> pb.GetFileResponse:
        check_id("file id", request.file_id)
        record = await (await self._desk_for(user)).get(user, request.file_id)
        return pb.GetFileResponse(file=file_to_pb(record))

    async def content(
        self, user: User, request: pb.GetFileContentRequest
    ) -> pb.GetFileContentResponse:
        check_id("file id", request.file_id)
        text = await (await self._desk_for(user)).content(user, request.file_id)
        return pb.GetFileContentResponse(content=text.encode())

    async def delete(self, user: User, request: pb.DeleteFileRequest) -> pb.DeleteFileResponse:
        check_id("file id", request.file_id)
        await (await self._desk_for(user)).delete(user, request.file_id)
        return pb.DeleteFileResponse()

    async def _desk_for(self, user: User) -> FileDesk:
        if self._desk is None:
            raise FailedPrecondition("this gateway keeps no files")
        if await self._homes.home_of(user) is not None:
            raise FailedPrecondition("files are kept in the user's home region: upload and "
                                     "read them through a gateway there")  # fmt: skip
        return self._desk
