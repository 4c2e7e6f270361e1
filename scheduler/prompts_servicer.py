"""PromptCaptureService: the captured prompts of answered turns, for operators. Translates and
delegates to the store; protobuf to scheduler/convert.py. A captured prompt holds a user's
words, so every read is logged with who asked (the name on the caller's certificate under
mutual TLS, and its address: the admin token is one for every operator) and what was read."""

from __future__ import annotations

import grpc
import structlog

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from domain.errors import InvalidArgument
from infra.admin_token import check_admin
from infra.grpcserver import maps_domain_errors
from infra.tls import peer
from scheduler import convert
from store.base import PromptStore


class PromptsServicer(pb_grpc.PromptCaptureServiceServicer):
    def __init__(self, store: PromptStore, admin_token: str) -> None:
        self._store = store
        self._admin_token = admin_token
        self._log = structlog.get_logger(component="prompt_capture")

    @maps_domain_errors
    async def GetCapturedPrompt(
        self, request: pb.GetCapturedPromptRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetCapturedPromptResponse:
        check_admin(context, self._admin_token)
        if not request.user_id or not request.message_id:
            raise InvalidArgument("a captured prompt is named by user_id and message_id")
        caller = peer(context)
        self._log.info("captured prompt read", user_id=request.user_id,
                       message_id=request.message_id, address=context.peer(),
                       certificate=caller.name if caller else "")  # fmt: skip
        prompt = await self._store.captured_prompt(request.user_id, request.message_id)
        return convert.captured_prompt_to_pb(prompt)
