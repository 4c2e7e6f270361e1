"""A user's personal memory across regions: kept only in the user's home region's store, and
reached by another region's gateway through HomeService (the memory API it serves the user,
and the entries its turns read). HomeMemoryCalls is HomeService's side (mixed into
gateway/home_servicer.py's servicer), HomeMemories the calling side, over a HomeStore's
channels (gateway/home_client.py): store/base.py's MemoryStore, so a MemoryDesk over it
behaves as one over the home region's own store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import grpc

from chat.v1 import home_service_pb2 as pb
from gateway.ids import check_id
from infra.grpcserver import maps_domain_errors
from store.base import MemoryStore
from store.records import MemoryRecord

if TYPE_CHECKING:
    from gateway.home_client import HomeStore

# A store call: the home region answers in milliseconds, or it is away.
CALL_TIMEOUT_S = 5.0
MAX_SEARCH = 100


def memory_to_pb(record: MemoryRecord) -> pb.StoredMemory:
    return pb.StoredMemory(memory_id=record.memory_id, text=record.text, pinned=record.pinned,
                           source=record.source, created_at=record.created_at,
                           updated_at=record.updated_at)  # fmt: skip


def memory_from_pb(m: pb.StoredMemory) -> MemoryRecord:
    return MemoryRecord(m.memory_id, m.text, m.pinned, m.source, m.created_at, m.updated_at)


class HomeMemoryCalls:
    """HomeService's memory calls over this region's store."""

    _store: MemoryStore

    @maps_domain_errors
    async def ListStoredMemories(
        self, request: pb.ListStoredMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListStoredMemoriesResponse:
        found = await self._store.list_memories(request.user_id)
        return pb.ListStoredMemoriesResponse(memories=[memory_to_pb(m) for m in found])

    @maps_domain_errors
    async def ReadMemory(
        self, request: pb.ReadMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReadMemoryResponse:
        check_id("memory id", request.memory_id)
        record = await self._store.get_memory(request.user_id, request.memory_id)
        return pb.ReadMemoryResponse(memory=memory_to_pb(record))

    @maps_domain_errors
    async def AddMemory(
        self, request: pb.AddMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.AddMemoryResponse:
        check_id("memory id", request.memory.memory_id)
        await self._store.add_memory(request.user_id, memory_from_pb(request.memory))
        return pb.AddMemoryResponse()

    @maps_domain_errors
    async def ChangeMemory(
        self, request: pb.ChangeMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.ChangeMemoryResponse:
        check_id("memory id", request.memory_id)
        record = await self._store.update_memory(request.user_id, request.memory_id,
                                                 request.text, request.pinned,
                                                 request.updated_at)  # fmt: skip
        return pb.ChangeMemoryResponse(memory=memory_to_pb(record))

    @maps_domain_errors
    async def DeleteStoredMemory(
        self, request: pb.DeleteStoredMemoryRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteStoredMemoryResponse:
        check_id("memory id", request.memory_id)
        await self._store.delete_memory(request.user_id, request.memory_id)
        return pb.DeleteStoredMemoryResponse()

    @maps_domain_errors
    async def SearchMemories(
        self, request: pb.SearchMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.SearchMemoriesResponse:
        limit = min(request.limit, MAX_SEARCH)
        found = await self._store.search_memories(request.user_id, list(request.terms), limit,
                                                  request.fresh_since)  # fmt: skip
        return pb.SearchMemoriesResponse(memories=[memory_to_pb(m) for m in found])


class HomeMemories:
    """The home region's MemoryStore, through its gateways."""

    def __init__(self, home: HomeStore) -> None:
        self._home = home

    async def list_memories(self, user_id: str) -> list[MemoryRecord]:
        request = pb.ListStoredMemoriesRequest(user_id=user_id)
        reply = await self._home._query(
            lambda stub: stub.ListStoredMemories(request, timeout=CALL_TIMEOUT_S)
        )
        return [memory_from_pb(m) for m in reply.memories]

    async def get_memory(self, user_id: str, memory_id: str) -> MemoryRecord:
        request = pb.ReadMemoryRequest(user_id=user_id, memory_id=memory_id)
        reply = await self._home._query(
            lambda stub: stub.ReadMemory(request, timeout=CALL_TIMEOUT_S)
        )
        return memory_from_pb(reply.memory)

    async def add_memory(self, user_id: str, memory: MemoryRecord) -> None:
        request = pb.AddMemoryRequest(user_id=user_id, memory=memory_to_pb(memory))
        await self._home._change(lambda stub: stub.AddMemory(request, timeout=CALL_TIMEOUT_S))

    async def update_memory(
        self, user_id: str, memory_id: str, text: str, pinned: bool, updated_at: float
    ) -> MemoryRecord:
        request = pb.ChangeMemoryRequest(user_id=user_id, memory_id=memory_id, text=text,
                                         pinned=pinned, updated_at=updated_at)  # fmt: skip
        reply = await self._home._change(
            lambda stub: stub.ChangeMemory(request, timeout=CALL_TIMEOUT_S)
        )
        return memory_from_pb(reply.memory)

    async def delete_memory(self, user_id: str, memory_id: str) -> None:
        request = pb.DeleteStoredMemoryRequest(user_id=user_id, memory_id=memory_id)
        await self._home._change(
            lambda stub: stub.DeleteStoredMemory(request, timeout=CALL_TIMEOUT_S)
        )

    async def search_memories(
        self, user_id: str, terms: Sequence[str], limit: int, fresh_since: float
    ) -> list[MemoryRecord]:
        request = pb.SearchMemoriesRequest(user_id=user_id, terms=list(terms), limit=limit,
                                           fresh_since=fresh_since)  # fmt: skip
        reply = await self._home._query(
            lambda stub: stub.SearchMemories(request, timeout=CALL_TIMEOUT_S)
        )
        return [memory_from_pb(m) for m in reply.memories]
