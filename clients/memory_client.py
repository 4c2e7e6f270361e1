"""A user's personal memory through a gateway (ChatService's memory calls): the entries their
stored conversations' turns may read, listed, written, edited and deleted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chat.v1 import chat_service_pb2 as chat_pb
from chat.v1 import chat_service_pb2_grpc as chat_grpc
from clients.base import DEFAULT_TIMEOUT_S, Client, ClientError, read_time
from infra.tls import TlsConfig


@dataclass(frozen=True, slots=True)
class Memory:
    memory_id: str
    text: str
    pinned: bool
    # "user" (written through this API) or "model" (a remember call in one of their turns).
    source: str
    created_at: datetime
    updated_at: datetime
    # Past the operator's age and not pinned: never read into a turn.
    aged: bool


def _memory(m: chat_pb.Memory) -> Memory:
    return Memory(m.memory_id, m.text, m.pinned, m.source, read_time(m.created_at),
                  read_time(m.updated_at), m.aged)  # fmt: skip


class MemoryClient(Client):
    def __init__(
        self,
        gateway_address: str,
        token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        tls: TlsConfig | None = None,
    ) -> None:
        super().__init__(gateway_address, token, timeout_s, tls)
        self._stub = chat_grpc.ChatServiceStub(self._channel)

    async def list(self) -> list[Memory]:
        """The newest written first."""
        reply = await self._unary(self._stub.ListMemories, chat_pb.ListMemoriesRequest())
        return [_memory(m) for m in reply.memories]

    async def create(self, text: str, pinned: bool = False) -> Memory:
        request = chat_pb.CreateMemoryRequest(text=text, pinned=pinned)
        return _memory((await self._unary(self._stub.CreateMemory, request)).memory)

    async def update(
        self, memory_id: str, text: str | None = None, pinned: bool | None = None
    ) -> Memory:
        """Changes what is given (text, pin or both) and nothing else."""
        mask = [name for name, value in (("text", text), ("pinned", pinned)) if value is not None]
        if not mask:
            raise ClientError("INVALID_ARGUMENT", "give a text, a pin or both")
        request = chat_pb.UpdateMemoryRequest(memory_id=memory_id, text=text or "",
                                              pinned=bool(pinned), update_mask=mask)  # fmt: skip
        return _memory((await self._unary(self._stub.UpdateMemory, request)).memory)

    async def delete(self, memory_id: str) -> None:
        await self._unary(self._stub.DeleteMemory, chat_pb.DeleteMemoryRequest(memory_id=memory_id))
