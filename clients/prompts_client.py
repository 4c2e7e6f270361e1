"""The captured prompts' admin call (PromptCaptureService, served by the scheduler): the exact
prompt of an answered turn, as a plain dataclass. Every read is logged by the scheduler with
who asked."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chat.v1 import scheduler_service_pb2 as sched_pb
from chat.v1 import scheduler_service_pb2_grpc as sched_grpc
from clients.base import DEFAULT_TIMEOUT_S, Client, read_time
from domain.types import Turn
from infra.convert import turn_from_pb
from infra.tls import TlsConfig


@dataclass(frozen=True, slots=True)
class CapturedPrompt:
    """The turns as the node was sent them (the system prompt first, each with the tokens it
    was counted at), the sampling, the version, the engine's model, and the replica that
    finished the answer."""

    message_id: str
    conversation_id: str
    version: str
    model: str
    node_id: str
    temperature: float
    max_tokens: int
    turns: tuple[Turn, ...]
    captured_at: datetime


class PromptsClient(Client):
    def __init__(
        self,
        scheduler_address: str,
        admin_token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        tls: TlsConfig | None = None,
    ) -> None:
        super().__init__(scheduler_address, admin_token, timeout_s, tls)
        self._stub = sched_grpc.PromptCaptureServiceStub(self._channel)

    async def captured(self, user_id: str, message_id: str) -> CapturedPrompt:
        """The prompt of the user's message `message_id` (not its answer's id); ClientError
        NOT_FOUND when none is kept."""
        request = sched_pb.GetCapturedPromptRequest(user_id=user_id, message_id=message_id)
        reply = await self._unary(self._stub.GetCapturedPrompt, request)
        return CapturedPrompt(
            reply.message_id,
            reply.conversation_id,
            reply.version,
            reply.model,
            reply.node_id,
            reply.temperature,
            reply.max_tokens,
            tuple(turn_from_pb(t.turn, t.tokens) for t in reply.turns),
            read_time(reply.captured_at),
        )
