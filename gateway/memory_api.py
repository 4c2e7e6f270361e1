"""ChatService's memory calls, translated: protobuf in and out, the work done by the gateway's
MemoryDesk (gateway/memories.py). A user's memory is kept at their home region only: a
gateway serving them from another region reads and writes it there, through HomeService."""

from __future__ import annotations

from chat.v1 import chat_service_pb2 as pb
from domain.errors import FailedPrecondition, InvalidArgument
from domain.types import User
from gateway.convert import timestamp_pb
from gateway.histories import Homes
from gateway.ids import check_id
from gateway.memories import ListedMemory, MemoryDesk

MASK_FIELDS = frozenset({"text", "pinned"})


def memory_to_pb(listed: ListedMemory) -> pb.Memory:
    record = listed.record
    return pb.Memory(memory_id=record.memory_id, text=record.text, pinned=record.pinned,
                     source=record.source, created_at=timestamp_pb(record.created_at),
                     updated_at=timestamp_pb(record.updated_at),
                     aged=listed.aged)  # fmt: skip


class MemoryApi:
    def __init__(self, desk: MemoryDesk | None, homes: Homes) -> None:
        self._desk = desk
        self._homes = homes

    async def list(self, user: User) -> pb.ListMemoriesResponse:
        listed = await (await self._desk_for(user)).list(user)
        return pb.ListMemoriesResponse(memories=[memory_to_pb(m) for m in listed])

    async def create(self, user: User, request: pb.CreateMemoryRequest) -> pb.CreateMemoryResponse:
        desk = await self._desk_for(user)
        record = await desk.create(user, request.text, request.pinned)
        return pb.CreateMemoryResponse(memory=memory_to_pb(ListedMemory(record, aged=False)))

    async def update(self, user: User, request: pb.UpdateMemoryRequest) -> pb.UpdateMemoryResponse:
        check_id("memory id", request.memory_id)
        mask = set(request.update_mask) or MASK_FIELDS
        unknown = sorted(mask - MASK_FIELDS)
        if unknown:
            raise InvalidArgument(f"update_mask names {unknown[0]!r}: only text and pinned "
                                  "can be changed")  # fmt: skip
        desk = await self._desk_for(user)
        text = request.text if "text" in mask else None
        pinned = request.pinned if "pinned" in mask else None
        record = await desk.update(user, request.memory_id, text, pinned)
        # Just written: not aged.
        return pb.UpdateMemoryResponse(memory=memory_to_pb(ListedMemory(record, aged=False)))

    async def delete(self, user: User, request: pb.DeleteMemoryRequest) -> pb.DeleteMemoryResponse:
        check_id("memory id", request.memory_id)
        await (await self._desk_for(user)).delete(user, request.memory_id)
        return pb.DeleteMemoryResponse()

    async def _desk_for(self, user: User) -> MemoryDesk:
        if self._desk is None:
            raise FailedPrecondition("this gateway keeps no memory")
        home = await self._homes.home_of(user)
        return self._desk if home is None else self._desk.over(home.memories())
