"""Server-sent events: how one ChatEvent is written on the wire."""

from __future__ import annotations

import json

from google.protobuf import json_format

from chat.v1 import chat_service_pb2 as pb
from chat.v1 import common_pb2

FINISH_NAMES = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length",
    common_pb2.FINISH_REASON_CANCELLED: "cancelled",
    common_pb2.FINISH_REASON_REFUSED: "refused",
    common_pb2.FINISH_REASON_ERROR: "error",
}


def event_payload(event: pb.ChatEvent) -> tuple[str, dict[str, object]]:
    kind = event.WhichOneof("kind")
    if kind == "meta":
        m = event.meta
        return "meta", {
            "messageId": m.message_id,
            "conversationId": m.conversation_id,
            "model": m.model,
            "replica": m.replica_id,
        }
    if kind == "delta":
        return "delta", {"text": event.delta.text}
    if kind == "done":
        u = event.done.usage
        return "done", {
            "finish": FINISH_NAMES.get(event.done.finish, "error"),
            "usage": {
                "input": u.input_tokens,
                "cached": u.cached_tokens,
                "output": u.output_tokens,
            },
        }
    if kind == "error":
        return "error", {"code": event.error.code, "message": event.error.message}
    return "error", {"code": 2, "message": "unknown event " + json_format.MessageToJson(event)}


def encode(event: pb.ChatEvent) -> bytes:
    name, payload = event_payload(event)
    data = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    return f"id: {event.event_id}\nevent: {name}\ndata: {data}\n\n".encode()


KEEPALIVE = b": keep-alive\n\n"
