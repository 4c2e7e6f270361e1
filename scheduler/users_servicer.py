"""UserService: users and their bearer tokens, for operators. Translates and delegates to
scheduler/users.py, protobuf to scheduler/convert.py.

SchedulerService still has the same five calls, for clients made before UserService: gRPC
serves one servicer per service (a second registration replaces the first's every method), so
SchedulerServicer keeps them and passes each here through `relay`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc
from google.protobuf.message import Message

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from infra.admin_token import check_admin
from infra.grpcserver import maps_domain_errors
from scheduler import convert
from scheduler.user_memories import UserMemories
from scheduler.users import UserAdmin

Request = TypeVar("Request", bound=Message)
Old = TypeVar("Old", bound=Message)


class UsersServicer(pb_grpc.UserServiceServicer):
    def __init__(self, users: UserAdmin, admin_token: str, memories: UserMemories) -> None:
        self._users = users
        self._admin_token = admin_token
        self._memories = memories

    @maps_domain_errors
    async def CreateUser(
        self, request: pb.UserServiceCreateUserRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceCreateUserResponse:
        check_admin(context, self._admin_token)
        tier = convert.tier_from_pb(request.tier)
        user, token = await self._users.create(
            request.user_id, tier, request.home_region, request.pinned
        )
        return pb.UserServiceCreateUserResponse(user=convert.user_to_pb(user), token=token)

    @maps_domain_errors
    async def ListUsers(
        self, request: pb.UserServiceListUsersRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceListUsersResponse:
        check_admin(context, self._admin_token)
        listed = await self._users.all()
        return pb.UserServiceListUsersResponse(
            users=[convert.user_to_pb(u.record, u.home, u.pinned) for u in listed]
        )

    @maps_domain_errors
    async def SetUserTier(
        self, request: pb.UserServiceSetUserTierRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceSetUserTierResponse:
        check_admin(context, self._admin_token)
        user = await self._users.set_tier(request.user_id, convert.tier_from_pb(request.tier))
        return pb.UserServiceSetUserTierResponse(user=convert.user_to_pb(user))

    @maps_domain_errors
    async def RotateUserToken(
        self, request: pb.UserServiceRotateUserTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceRotateUserTokenResponse:
        check_admin(context, self._admin_token)
        token = await self._users.rotate_token(request.user_id)
        return pb.UserServiceRotateUserTokenResponse(token=token)

    @maps_domain_errors
    async def RevokeUserTokens(
        self, request: pb.UserServiceRevokeUserTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceRevokeUserTokensResponse:
        check_admin(context, self._admin_token)
        await self._users.revoke_tokens(request.user_id)
        return pb.UserServiceRevokeUserTokensResponse()

    @maps_domain_errors
    async def DeleteUser(
        self, request: pb.UserServiceDeleteUserRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceDeleteUserResponse:
        check_admin(context, self._admin_token)
        await self._users.delete(request.user_id)
        return pb.UserServiceDeleteUserResponse()

    @maps_domain_errors
    async def ExportUserMemories(
        self, request: pb.UserServiceExportUserMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceExportUserMemoriesResponse:
        check_admin(context, self._admin_token)
        found = await self._memories.export(request.user_id)
        return pb.UserServiceExportUserMemoriesResponse(
            memories=[convert.memory_to_pb(memory) for memory in found]
        )

    @maps_domain_errors
    async def DeleteUserMemories(
        self, request: pb.UserServiceDeleteUserMemoriesRequest, context: grpc.aio.ServicerContext
    ) -> pb.UserServiceDeleteUserMemoriesResponse:
        check_admin(context, self._admin_token)
        deleted = await self._memories.delete(request.user_id, list(request.memory_ids))
        return pb.UserServiceDeleteUserMemoriesResponse(deleted=deleted)


async def relay(
    call: Callable[[Request, grpc.aio.ServicerContext], Awaitable[Message]],
    kind: type[Request],
    request: Message,
    context: grpc.aio.ServicerContext,
    reply: type[Old],
) -> Old:
    """An old SchedulerService user call answered by UserService's call of the same name, whose
    request is `kind`. The two services' messages have the same fields, number for number (a
    test holds them so), so each is the other's bytes read as its own type."""
    answer = await call(kind.FromString(request.SerializeToString()), context)
    return reply.FromString(answer.SerializeToString())
