"""/v1/memories at the edge: the bodies checked and turned into ChatService's memory calls, and
the replies into the conversation API's JSON (camelCase, times in RFC 3339)."""

from __future__ import annotations

from typing import Any

from chat.v1 import chat_service_pb2 as pb
from edge.errors import HttpError

CREATE_FIELDS = frozenset({"text", "pinned"})


def _fields(body: dict[str, Any]) -> tuple[str | None, bool | None]:
    unknown = sorted(set(body) - CREATE_FIELDS)
    if unknown:
        raise HttpError(400, f"unrecognized request argument supplied: {unknown[0]}")
    text, pinned = body.get("text"), body.get("pinned")
    if text is not None and not isinstance(text, str):
        raise HttpError(400, "'text' must be a string")
    if pinned is not None and not isinstance(pinned, bool):
        raise HttpError(400, "'pinned' must be true or false")
    return text, pinned


def list_request() -> pb.ListMemoriesRequest:
    return pb.ListMemoriesRequest()


def delete_request(memory_id: str) -> pb.DeleteMemoryRequest:
    return pb.DeleteMemoryRequest(memory_id=memory_id)


def create_request(body: dict[str, Any]) -> pb.CreateMemoryRequest:
    text, pinned = _fields(body)
    if text is None:
        raise HttpError(400, "'text' is required")
    return pb.CreateMemoryRequest(text=text, pinned=bool(pinned))


def update_request(memory_id: str, body: dict[str, Any]) -> pb.UpdateMemoryRequest:
    """Changes what the body names and nothing else."""
    text, pinned = _fields(body)
    if text is None and pinned is None:
        raise HttpError(400, "name 'text', 'pinned' or both")
    mask = [name for name, value in (("text", text), ("pinned", pinned)) if value is not None]
    return pb.UpdateMemoryRequest(memory_id=memory_id, text=text or "", pinned=bool(pinned),
                                  update_mask=mask)  # fmt: skip


def memory_json(m: pb.Memory) -> dict[str, Any]:
    return {
        "id": m.memory_id,
        "text": m.text,
        "pinned": m.pinned,
        "source": m.source,
        "createdAt": m.created_at.ToJsonString(),
        "updatedAt": m.updated_at.ToJsonString(),
        "aged": m.aged,
    }


def list_json(reply: pb.ListMemoriesResponse) -> dict[str, Any]:
    return {"memories": [memory_json(m) for m in reply.memories]}


def memory_reply_json(reply: pb.CreateMemoryResponse | pb.UpdateMemoryResponse) -> dict[str, Any]:
    return {"memory": memory_json(reply.memory)}
