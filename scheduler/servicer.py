"""SchedulerService: node streams in, picks and admin calls out. Translates and delegates,
protobuf to scheduler/convert.py; users are UserService's (scheduler/users_servicer.py), which
answers the user calls this service keeps for older clients."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import grpc
import structlog

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from domain import rollout
from domain.errors import (
    InvalidArgument,
    NoReplica,
    NotFound,
    PermissionDenied,
    Unavailable,
)
from domain.ladder import MAX_RUNG
from domain.picker import ReplicaLoad
from infra.admin_token import check_admin
from infra.grpcserver import maps_domain_errors
from infra.rollout_convert import (
    ratings_from_pb,
    rollout_to_pb,
    tallies_from_pb,
    tallies_to_pb,
    version_from_pb,
)
from infra.tls import peer
from scheduler import convert
from scheduler.canary import CanaryWatch
from scheduler.ladder import ETCD_ERRORS, LadderKeeper
from scheduler.membership import Membership
from scheduler.rollout import RolloutKeeper
from scheduler.table import LoadTable, NodeEntry
from scheduler.users_servicer import UsersServicer, relay

MAX_ID_CHARS = 128
# A gateway's held rollout read is answered by then, changed or not.
MAX_ROLLOUT_WAIT_S = 30.0
# A held read answers "unchanged" this long before the caller's deadline, so that a
# long wait with a short deadline is an answer, not DEADLINE_EXCEEDED.
DEADLINE_MARGIN_S = 0.25


def held_wait_s(wait_ms: int, time_remaining_s: float | None) -> float:
    """How long a rollout read may be held: what was asked, capped, inside the deadline."""
    wait_s = min(wait_ms / 1000, MAX_ROLLOUT_WAIT_S)
    if time_remaining_s is None:
        return wait_s
    return max(0.0, min(wait_s, time_remaining_s - DEADLINE_MARGIN_S))


class SchedulerServicer(pb_grpc.SchedulerServiceServicer):
    def __init__(
        self,
        table: LoadTable,
        membership: Membership,
        users: UsersServicer,
        admin_token: str,
        ladder: LadderKeeper,
        pools: frozenset[str],
        rollout: RolloutKeeper,
        canary: CanaryWatch,
    ) -> None:
        self._rollout = rollout
        self._canary = canary
        self._table = table
        self._membership = membership
        # The stream that owns each node's registration: after a reconnect, the old stream's
        # end must not deregister the node that the new stream registered.
        self._node_streams: dict[str, NodeEntry] = {}
        self._users = users
        self._admin_token = admin_token
        self._ladder = ladder
        self._pools = pools
        self._log = structlog.get_logger(component="scheduler")

    # The node stream ----------------------------------------------------------------------------

    @maps_domain_errors
    async def ConnectNode(
        self,
        request_iterator: AsyncIterator[pb.ConnectNodeRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.ConnectNodeResponse]:
        first = await anext(aiter(request_iterator), None)
        if first is None or first.WhichOneof("kind") != "registration":
            raise InvalidArgument("a node stream starts with its registration")
        reg = first.registration
        caller = peer(context)
        # The table lets only node certificates this far; a node speaks for itself alone.
        if caller is not None and caller.name != reg.node_id:
            raise PermissionDenied(
                f"a certificate of {caller.name!r} cannot register node {reg.node_id!r}"
            )
        self._check_pool(reg.pool)
        entry = self._table.join(
            convert.registration_to_load(reg), reg.context_tokens, reg.kv_capacity_tokens
        )
        if entry.drained_by_operator:
            entry.commands.put_nowait(True)
        reader = asyncio.create_task(self._read_reports(reg.node_id, request_iterator, entry))
        self._node_streams[reg.node_id] = entry
        try:
            await self._membership.register(convert.registration_to_record(reg))
            while not reader.done():
                command = asyncio.create_task(entry.commands.get())
                done, _ = await asyncio.wait({command, reader}, return_when="FIRST_COMPLETED")
                if command in done:
                    yield convert.command_to_pb(command.result())
                else:
                    command.cancel()
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            self._table.leave(reg.node_id, entry)
            if self._node_streams.get(reg.node_id) is entry:
                del self._node_streams[reg.node_id]
                await self._membership.deregister(reg.node_id)

    async def _read_reports(
        self, node_id: str, requests: AsyncIterator[pb.ConnectNodeRequest], entry: NodeEntry
    ) -> None:
        with contextlib.suppress(grpc.aio.AioRpcError):
            async for message in requests:
                if message.WhichOneof("kind") == "load":
                    self._table.report(node_id, **convert.load_fields(message.load))

    # Picking ------------------------------------------------------------------------------------

    def _check_pool(self, pool: str) -> None:
        if pool not in self._pools:
            known = ", ".join(sorted(self._pools))
            raise InvalidArgument(f"unknown pool {pool!r}; this fleet's pools are {known}")

    @maps_domain_errors
    async def PickReplica(
        self, request: pb.PickReplicaRequest, context: grpc.aio.ServicerContext
    ) -> pb.PickReplicaResponse:
        return self._pick(request)

    @maps_domain_errors
    async def PickReplicas(
        self,
        request_iterator: AsyncIterator[pb.PickReplicasRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.PickReplicasResponse]:
        # A pick never waits, so each is answered before the next is read: in order, at once.
        async for ask in request_iterator:
            try:
                made = self._pick(ask.pick)
            except NoReplica as refused:
                yield pb.PickReplicasResponse(pick_id=ask.pick_id, detail=refused.reason,
                                              refusal=pb.PICK_REFUSAL_NO_REPLICA)  # fmt: skip
            except InvalidArgument as refused:
                yield pb.PickReplicasResponse(pick_id=ask.pick_id, detail=refused.reason,
                                              refusal=pb.PICK_REFUSAL_INVALID_ARGUMENT)  # fmt: skip
            else:
                yield pb.PickReplicasResponse(pick_id=ask.pick_id, pick=made)

    def _pick(self, request: pb.PickReplicaRequest) -> pb.PickReplicaResponse:
        if not request.conversation_id or len(request.conversation_id) > MAX_ID_CHARS:
            raise InvalidArgument(f"conversation_id must be 1..{MAX_ID_CHARS} characters")
        self._check_pool(request.pool)
        pick = self._table.pick(
            request.pool,
            request.conversation_id,
            request.prompt_tokens,
            request.reusable_prefix_tokens,
            excluded=frozenset(request.exclude_node_ids),
            # A version's own model: the pool's nodes serving another one are left out.
            set_aside=self._table.other_models(request.pool, request.model),
        )
        if pick.replica is None:
            serving = f" serving model {request.model!r}" if request.model else ""
            raise NoReplica(f"no replica of pool {request.pool!r}{serving} is ready; retry shortly")
        return convert.pick_to_pb(
            pick.replica,
            pick.reason,
            self._start_wait_s(request.pool, pick.replica, request.tier),
            self._ladder.state.effective_rung,
            self._table.context_tokens(pick.replica.node_id),
        )

    def _start_wait_s(self, pool: str, replica: ReplicaLoad, tier: common_pb2.Tier) -> float:
        return self._table.start_wait_s(pool, replica.node_id, convert.paid(tier))

    # Admin: fleet -------------------------------------------------------------------------------

    @maps_domain_errors
    async def ListNodes(
        self, request: pb.ListNodesRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListNodesResponse:
        check_admin(context, self._admin_token)
        nodes = [
            # The table's clock is monotonic; operators read wall-clock times.
            convert.node_status_to_pb(node_id, entry, time.time() - self._table.report_age_s(entry))
            for node_id, entry in self._table.entries()
            if not request.pool or entry.load.pool == request.pool
        ]
        return pb.ListNodesResponse(nodes=nodes)

    async def _drain(self, node_id: str, drained: bool, context: grpc.aio.ServicerContext) -> None:
        check_admin(context, self._admin_token)
        entry = self._table.set_drained(node_id, drained)
        if entry is None:
            raise NotFound(f"no node {node_id!r}")
        entry.commands.put_nowait(drained)

    @maps_domain_errors
    async def DrainNode(
        self, request: pb.DrainNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.DrainNodeResponse:
        await self._drain(request.node_id, True, context)
        return pb.DrainNodeResponse()

    @maps_domain_errors
    async def UndrainNode(
        self, request: pb.UndrainNodeRequest, context: grpc.aio.ServicerContext
    ) -> pb.UndrainNodeResponse:
        await self._drain(request.node_id, False, context)
        return pb.UndrainNodeResponse()

    @maps_domain_errors
    async def GetLadder(
        self, request: pb.GetLadderRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetLadderResponse:
        check_admin(context, self._admin_token)
        return convert.ladder_to_pb(self._ladder.state, self._ladder.leading)

    @maps_domain_errors
    async def PinLadder(
        self, request: pb.PinLadderRequest, context: grpc.aio.ServicerContext
    ) -> pb.PinLadderResponse:
        check_admin(context, self._admin_token)
        rung = request.rung if request.HasField("rung") else None
        if rung is not None and rung > MAX_RUNG:
            raise InvalidArgument(f"rung must be 0..{MAX_RUNG}")
        try:
            state = await self._ladder.pin(rung)
        except (*ETCD_ERRORS,) as error:
            raise Unavailable(f"the ladder store is unreachable: {error}") from error
        return pb.PinLadderResponse(rung=state.effective_rung, pinned=state.pinned is not None)

    # Users, for clients made before UserService: answered there ------------------------------

    async def CreateUser(
        self, request: pb.CreateUserRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateUserResponse:
        new = pb.UserServiceCreateUserRequest
        return await relay(self._users.CreateUser, new, request, context, pb.CreateUserResponse)

    async def ListUsers(
        self, request: pb.ListUsersRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListUsersResponse:
        new = pb.UserServiceListUsersRequest
        return await relay(self._users.ListUsers, new, request, context, pb.ListUsersResponse)

    async def SetUserTier(
        self, request: pb.SetUserTierRequest, context: grpc.aio.ServicerContext
    ) -> pb.SetUserTierResponse:
        new = pb.UserServiceSetUserTierRequest
        return await relay(self._users.SetUserTier, new, request, context, pb.SetUserTierResponse)

    async def RotateUserToken(
        self, request: pb.RotateUserTokenRequest, context: grpc.aio.ServicerContext
    ) -> pb.RotateUserTokenResponse:
        new, old = pb.UserServiceRotateUserTokenRequest, pb.RotateUserTokenResponse
        return await relay(self._users.RotateUserToken, new, request, context, old)

    async def RevokeUserTokens(
        self, request: pb.RevokeUserTokensRequest, context: grpc.aio.ServicerContext
    ) -> pb.RevokeUserTokensResponse:
        new, old = pb.UserServiceRevokeUserTokensRequest, pb.RevokeUserTokensResponse
        return await relay(self._users.RevokeUserTokens, new, request, context, old)

    # Admin: model versions and their rollout --------------------------------------------------

    @maps_domain_errors
    async def GetRollout(
        self, request: pb.GetRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetRolloutResponse:
        if request.tallies:
            self._canary.told(tallies_from_pb(request.tallies))
        if request.ratings:
            self._canary.rated(ratings_from_pb(request.ratings))
        wait_s = held_wait_s(request.wait_ms, context.time_remaining())
        state, revision = await self._read_rollout(request.known_revision, wait_s)
        known = request.known_revision or request.wait_ms  # with a wait, 0 is a revision
        if known and request.known_revision == revision:
            return pb.GetRolloutResponse(revision=revision)
        return pb.GetRolloutResponse(revision=revision, rollout=rollout_to_pb(state))

    @maps_domain_errors
    async def CreateVersion(
        self, request: pb.CreateVersionRequest, context: grpc.aio.ServicerContext
    ) -> pb.CreateVersionResponse:
        check_admin(context, self._admin_token)
        version = version_from_pb(request.version)
        state = await self._change_rollout(lambda s, at: rollout.create(s, version, at))
        self._log.info("version created", version=version.name, model=version.model)
        return pb.CreateVersionResponse(rollout=rollout_to_pb(state))

    @maps_domain_errors
    async def ChangeRollout(
        self, request: pb.ChangeRolloutRequest, context: grpc.aio.ServicerContext
    ) -> pb.ChangeRolloutResponse:
        check_admin(context, self._admin_token)
        edit = convert.rollout_edit(request)
        state = await self._change_rollout(edit)
        change = state.history[-1]
        self._log.warning("rollout changed", action=change.action, version=change.version,
                          detail=change.detail)  # fmt: skip
        return pb.ChangeRolloutResponse(rollout=rollout_to_pb(state))

    @maps_domain_errors
    async def GetVersionScores(
        self, request: pb.GetVersionScoresRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetVersionScoresResponse:
        check_admin(context, self._admin_token)
        tallies = self._canary.by_tier(request.version)
        return pb.GetVersionScoresResponse(tallies=tallies_to_pb(tallies),
                                           window_seconds=self._canary.window_s)  # fmt: skip

    async def _read_rollout(
        self, known_revision: int = 0, wait_s: float = 0.0
    ) -> tuple[rollout.RolloutState, int]:
        try:
            if wait_s > 0:
                return await self._rollout.read_after(known_revision, wait_s)
            return await self._rollout.read()
        except ETCD_ERRORS as error:
            raise Unavailable(f"the rollout store is unreachable: {error}") from error

    async def _change_rollout(self, edit: convert.RolloutEdit) -> rollout.RolloutState:
        try:
            return await self._rollout.change(edit)
        except (*ETCD_ERRORS,) as error:
            raise Unavailable(f"the rollout store is unreachable: {error}") from error
