"""ReplayService: a captured prompt answered again, for operators (admin token). Translates
and delegates to gateway/replay.py."""

from __future__ import annotations

import grpc
import structlog

from chat.v1 import replay_service_pb2 as pb
from chat.v1 import replay_service_pb2_grpc as pb_grpc
from domain.errors import InvalidArgument
from gateway.replay import Replayer
from infra.admin_token import check_admin
from infra.convert import FINISH_TO_PB, usage_to_pb
from infra.grpcserver import maps_domain_errors
from infra.tls import peer


class ReplayServicer(pb_grpc.ReplayServiceServicer):
    def __init__(self, replayer: Replayer, admin_token: str) -> None:
        self._replayer = replayer
        self._admin_token = admin_token
        self._log = structlog.get_logger(component="replay")

    @maps_domain_errors
    async def ReplayPrompt(
        self, request: pb.ReplayPromptRequest, context: grpc.aio.ServicerContext
    ) -> pb.ReplayPromptResponse:
        check_admin(context, self._admin_token)
        if not request.user_id or not request.message_id:
            raise InvalidArgument("a replay names the user_id and the message_id")
        caller = peer(context)
        certificate = caller.name if caller else ""
        # A replay reads a captured prompt: logged as the scheduler logs a read.
        self._log.info("captured prompt replayed", user_id=request.user_id,
                       message_id=request.message_id, version=request.version,
                       address=context.peer(), certificate=certificate)  # fmt: skip
        replay = await self._replayer.replay(request.user_id, request.message_id, request.version)
        return pb.ReplayPromptResponse(
            version=replay.version,
            model=replay.model,
            node_id=replay.node_id,
            original=replay.original,
            replayed=replay.replayed,
            finish=FINISH_TO_PB[replay.finish],
            usage=usage_to_pb(replay.usage),
            system_prompt_replaced=replay.system_prompt_replaced,
        )
