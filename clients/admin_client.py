"""The Python admin client of the platform: how operators' tools (chatctl, the tests'
platforms, the benchmarks) call a scheduler with the admin token: the fleet and the ladder
(`chat.v1.SchedulerService`), users and their tokens (`chat.v1.UserService`). Plain, typed
dataclasses in and out, as clients/chat_client.py's; failures are `ClientError`
(clients/base.py). The model versions' calls are clients/rollout_client.py's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from chat.v1 import common_pb2
from chat.v1 import scheduler_service_pb2 as sched_pb
from chat.v1 import scheduler_service_pb2_grpc as sched_grpc
from clients.base import DEFAULT_TIMEOUT_S, Client, ClientError, read_time
from infra.convert import TIER_NAMES
from infra.tls import TlsConfig

TIERS = {name: value for value, name in TIER_NAMES.items()}


def _enum_name(value: int, enum: Any, prefix: str) -> str:
    """NODE_STATE_READY -> 'ready': the readable name callers compare against."""
    return enum.Name(value).removeprefix(prefix).lower()


@dataclass(frozen=True, slots=True)
class Node:
    node_id: str
    address: str
    model: str
    pool: str
    # starting | ready | draining | dead
    state: str
    context_tokens: int
    kv_capacity_tokens: int
    kv_usage: float
    free_kv_tokens: int
    queued_prefill_tokens: int
    running_requests: int
    waiting_requests: int
    prefix_hit_rate: float
    last_report_at: datetime


@dataclass(frozen=True, slots=True)
class LadderChange:
    at: datetime
    from_rung: int
    to_rung: int
    busy_share: float
    reason: str


@dataclass(frozen=True, slots=True)
class Ladder:
    # The rung gateways apply: the pinned one while pinned.
    rung: int
    busy_share: float
    pinned: bool
    # Whether this scheduler is the one that moves the ladder.
    leading: bool
    # The newest move last.
    history: list[LadderChange]


@dataclass(frozen=True, slots=True)
class User:
    user_id: str
    tier: str
    created_at: datetime
    has_token: bool
    # With regions: the home region and residency ('' and False without regions).
    home_region: str = ""
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class CreatedUser:
    user: User
    # Shown once: the platform keeps only its hash.
    token: str


@dataclass(frozen=True, slots=True)
class UserMemory:
    """One entry of a user's personal memory, as an export shows it."""

    memory_id: str
    text: str
    pinned: bool
    source: str
    created_at: datetime
    updated_at: datetime


def _node(n: sched_pb.NodeStatus) -> Node:
    reg, load = n.registration, n.load
    return Node(
        node_id=reg.node_id,
        address=reg.address,
        model=reg.model,
        pool=reg.pool,
        state=_enum_name(load.state, sched_pb.NodeState, "NODE_STATE_"),
        context_tokens=reg.context_tokens,
        kv_capacity_tokens=reg.kv_capacity_tokens,
        kv_usage=load.kv_usage,
        free_kv_tokens=load.free_kv_tokens,
        queued_prefill_tokens=load.queued_prefill_tokens,
        running_requests=load.running_requests,
        waiting_requests=load.waiting_requests,
        prefix_hit_rate=load.prefix_hit_rate,
        last_report_at=read_time(n.last_report_at),
    )


def _ladder(reply: sched_pb.GetLadderResponse) -> Ladder:
    history = [
        LadderChange(read_time(c.at), c.from_rung, c.to_rung, c.busy_share, c.reason)
        for c in reply.history
    ]
    return Ladder(reply.rung, reply.busy_share, reply.pinned, reply.leading, history)


def _user(u: sched_pb.User) -> User:
    return User(u.user_id, TIER_NAMES.get(u.tier, "unknown"), read_time(u.created_at), u.has_token,
                u.home_region, u.pinned)  # fmt: skip


def _tier(tier: str) -> common_pb2.Tier:
    if tier not in TIERS:
        raise ClientError("INVALID_ARGUMENT", f"tier must be free or plus, not {tier!r}")
    return TIERS[tier]


class AdminClient(Client):
    """The operators' view, through a scheduler's admin API (needs an admin token)."""

    def __init__(
        self,
        scheduler_address: str,
        admin_token: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        tls: TlsConfig | None = None,
    ) -> None:
        super().__init__(scheduler_address, admin_token, timeout_s, tls)
        self._stub = sched_grpc.SchedulerServiceStub(self._channel)
        self._users = sched_grpc.UserServiceStub(self._channel)

    async def nodes(self, pool: str = "") -> list[Node]:
        reply = await self._unary(self._stub.ListNodes, sched_pb.ListNodesRequest(pool=pool))
        return sorted((_node(n) for n in reply.nodes), key=lambda n: n.node_id)

    async def drain(self, node_id: str) -> None:
        await self._unary(self._stub.DrainNode, sched_pb.DrainNodeRequest(node_id=node_id))

    async def undrain(self, node_id: str) -> None:
        await self._unary(self._stub.UndrainNode, sched_pb.UndrainNodeRequest(node_id=node_id))

    async def ladder(self) -> Ladder:
        return _ladder(await self._unary(self._stub.GetLadder, sched_pb.GetLadderRequest()))

    async def pin(self, rung: int | None) -> Ladder:
        """Pins the ladder at rung, or unpins it with None; answers the ladder as it now is."""
        request = (
            sched_pb.PinLadderRequest() if rung is None else sched_pb.PinLadderRequest(rung=rung)
        )
        await self._unary(self._stub.PinLadder, request)
        return await self.ladder()

    async def create_user(
        self, user_id: str, tier: str, home_region: str = "", pinned: bool = False
    ) -> CreatedUser:
        """With regions: home_region is the scheduler's own ('' says so), pinned keeps the
        user's conversations there."""
        request = sched_pb.UserServiceCreateUserRequest(
            user_id=user_id, tier=_tier(tier), home_region=home_region, pinned=pinned
        )
        reply = await self._unary(self._users.CreateUser, request)
        return CreatedUser(_user(reply.user), reply.token)

    async def users(self) -> list[User]:
        reply = await self._unary(self._users.ListUsers, sched_pb.UserServiceListUsersRequest())
        return [_user(u) for u in reply.users]

    async def set_tier(self, user_id: str, tier: str) -> User:
        request = sched_pb.UserServiceSetUserTierRequest(user_id=user_id, tier=_tier(tier))
        return _user((await self._unary(self._users.SetUserTier, request)).user)

    async def rotate_token(self, user_id: str) -> str:
        request = sched_pb.UserServiceRotateUserTokenRequest(user_id=user_id)
        return str((await self._unary(self._users.RotateUserToken, request)).token)

    async def revoke_tokens(self, user_id: str) -> None:
        request = sched_pb.UserServiceRevokeUserTokensRequest(user_id=user_id)
        await self._unary(self._users.RevokeUserTokens, request)

    async def delete_user(self, user_id: str) -> None:
        """The user and everything kept of them: conversations, ratings, captured prompts."""
        request = sched_pb.UserServiceDeleteUserRequest(user_id=user_id)
        await self._unary(self._users.DeleteUser, request)

    async def export_memories(self, user_id: str) -> list[UserMemory]:
        """Every entry of the user's memory, the newest written first."""
        request = sched_pb.UserServiceExportUserMemoriesRequest(user_id=user_id)
        reply = await self._unary(self._users.ExportUserMemories, request)
        return [UserMemory(m.memory_id, m.text, m.pinned, m.source, read_time(m.created_at),
                           read_time(m.updated_at)) for m in reply.memories]  # fmt: skip

    async def delete_memories(self, user_id: str, memory_ids: list[str] | None = None) -> int:
        """Deletes the entries named, or all of them; how many were deleted."""
        request = sched_pb.UserServiceDeleteUserMemoriesRequest(
            user_id=user_id, memory_ids=memory_ids or []
        )
        return int((await self._unary(self._users.DeleteUserMemories, request)).deleted)
