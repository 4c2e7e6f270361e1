"""The captured prompts' admin calls, as plain dataclasses: the exact prompt of an answered
turn (PromptCaptureService, served by the scheduler), and that prompt answered again by a
version (ReplayService, served by gateways). Every read and replay is logged with who asked."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from chat.v1 import replay_service_pb2 as replay_pb
from chat.v1 import replay_service_pb2_grpc as replay_grpc
from chat.v1 import scheduler_service_pb2 as sched_pb
from chat.v1 import scheduler_service_pb2_grpc as sched_grpc
from clients.base import DEFAULT_TIMEOUT_S, Client, read_time
from domain.answer_options import ToolDefinition
from domain.types import Turn
from infra.convert import FINISH_NAMES, tools_from_pb, turn_from_pb
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
    # The tools offered with it (a turn the tool loop ran); none for others.
    tools: tuple[ToolDefinition, ...] = ()


@dataclass(frozen=True, slots=True)
class Replay:
    """A turn's answer then (as stored) and now, at temperature 0, from `version`."""

    user_id: str
    message_id: str
    version: str
    model: str
    node_id: str
    original: str
    replayed: str
    finish: str
    input_tokens: int
    output_tokens: int
    system_prompt_replaced: bool

    @property
    def identical(self) -> bool:
        return self.original == self.replayed


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
            tools_from_pb(reply.tools),
        )


class ReplayClient(Client):
    def __init__(
        self,
        gateway_address: str,
        admin_token: str,
        *,
        timeout_s: float = 600.0,
        tls: TlsConfig | None = None,
    ) -> None:
        super().__init__(gateway_address, admin_token, timeout_s, tls)
        self._stub = replay_grpc.ReplayServiceStub(self._channel)

    async def replay(self, user_id: str, message_id: str, version: str = "") -> Replay:
        """The user's message `message_id` answered again by `version` ('': the one that
        served it); ClientError NOT_FOUND when no prompt is kept for it or no such version."""
        request = replay_pb.ReplayPromptRequest(
            user_id=user_id, message_id=message_id, version=version
        )
        reply = await self._unary(self._stub.ReplayPrompt, request)
        return Replay(user_id, message_id, reply.version, reply.model, reply.node_id,
                      reply.original, reply.replayed, FINISH_NAMES.get(reply.finish, "error"),
                      reply.usage.input_tokens, reply.usage.output_tokens,
                      reply.system_prompt_replaced)  # fmt: skip
