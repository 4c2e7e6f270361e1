"""One user message as it was sent: its fields, the checks it must pass before anything is
stored, and its fingerprint (what tells a retry from another message under the same id)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from domain.errors import InvalidArgument, MessageTooLarge
from gateway.ids import check_id, check_parent_id
from gateway.tool_requests import PlatformTool


@dataclass(frozen=True, slots=True)
class SendRequest:
    conversation_id: str
    message_id: str
    parent_id: str
    content: str
    pool: str | None  # None: the router decides
    # The meta event's notice about the region serving (gateway/regions.py).
    region_notice: str = ""
    # This message's own system prompt (the Responses API's instructions); "": the platform's.
    instructions: str = ""
    # The client cannot withdraw shown text: hold-back whatever the tier's output mode.
    hold_back: bool = False
    # At most this many answer tokens, below the tier's cap; 0: the tier's cap.
    max_tokens: int = 0
    # Tools the platform runs for this message: its answer is the tool loop's.
    tools: tuple[PlatformTool, ...] = ()

    def fingerprint(self) -> str:
        parts = [self.conversation_id, self.parent_id, self.content, self.pool or ""]
        if self.instructions or self.hold_back or self.max_tokens:
            # Only then, so the fingerprints of messages sent before these fields existed hold.
            parts += [self.instructions, str(self.hold_back), str(self.max_tokens)]
        if self.tools:
            parts += [repr(tool) for tool in self.tools]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def validate(request: SendRequest, max_chars: int) -> None:
    check_id("conversation id", request.conversation_id)
    check_id("message id", request.message_id)
    check_parent_id(request.parent_id)
    if not request.content.strip():
        raise InvalidArgument("content must not be empty")
    if len(request.content) > max_chars:
        raise MessageTooLarge(
            f"content has {len(request.content)} characters; at most {max_chars} are accepted"
        )
    if len(request.instructions) > max_chars:
        raise MessageTooLarge(
            f"instructions have {len(request.instructions)} characters; "
            f"at most {max_chars} are accepted"
        )
