"""The model versions' admin calls (SchedulerService: GetRollout, CreateVersion,
ChangeRollout), answering the rollout as plain values (domain/rollout.py)."""

from __future__ import annotations

from chat.v1 import scheduler_service_pb2 as sched_pb
from chat.v1 import scheduler_service_pb2_grpc as sched_grpc
from clients.base import DEFAULT_TIMEOUT_S, Client
from domain.guardrails import Tally
from domain.rollout import GateRecord, RolloutState, Version
from domain.types import Tier
from infra.convert import TIER_TO_PB
from infra.rollout_convert import (
    gate_sizes_to_pb,
    rollout_from_pb,
    tallies_from_pb,
    version_to_pb,
)
from infra.tls import TlsConfig


class RolloutClient(Client):
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

    async def rollout(self) -> RolloutState:
        return (await self.revised())[1]

    async def revised(self) -> tuple[int, RolloutState]:
        """The rollout with its revision (what gateways report as gateway_rollout_revision)."""
        reply = await self._unary(self._stub.GetRollout, sched_pb.GetRolloutRequest())
        return reply.revision, rollout_from_pb(reply.rollout)

    async def scores(self, version: str = "") -> tuple[float, dict[tuple[str, Tier], Tally]]:
        """The scheduler's trailing window (seconds) and each version's tallies in it per tier
        ('': every version)."""
        request = sched_pb.GetVersionScoresRequest(version=version)
        reply = await self._unary(self._stub.GetVersionScores, request)
        return reply.window_seconds, tallies_from_pb(reply.tallies)

    async def create(self, version: Version) -> RolloutState:
        request = sched_pb.CreateVersionRequest(version=version_to_pb(version))
        return rollout_from_pb((await self._unary(self._stub.CreateVersion, request)).rollout)

    async def _change(self, request: sched_pb.ChangeRolloutRequest) -> RolloutState:
        return rollout_from_pb((await self._unary(self._stub.ChangeRollout, request)).rollout)

    async def split(self, version: str, tier: str, percent: float) -> RolloutState:
        change = sched_pb.SplitChange(version=version, tier=TIER_TO_PB[Tier(tier)],
                                      percent=percent)  # fmt: skip
        return await self._change(sched_pb.ChangeRolloutRequest(split=change))

    async def promote(self, version: str, force: bool = False) -> RolloutState:
        change = sched_pb.PromoteChange(version=version, force=force)
        return await self._change(sched_pb.ChangeRolloutRequest(promote=change))

    async def rollback(self, reason: str) -> RolloutState:
        change = sched_pb.RollbackChange(reason=reason)
        return await self._change(sched_pb.ChangeRolloutRequest(rollback=change))

    async def move_holdout(self, version: str) -> RolloutState:
        change = sched_pb.HoldoutChange(version=version)
        return await self._change(sched_pb.ChangeRolloutRequest(holdout=change))

    async def pin(self, user_id: str, version: str) -> RolloutState:
        change = sched_pb.PinChange(user_id=user_id, version=version)
        return await self._change(sched_pb.ChangeRolloutRequest(pin=change))

    async def record_gate(self, gate: GateRecord) -> RolloutState:
        """The eval's verdict (its `at` is the scheduler's to set)."""
        change = sched_pb.GateChange(candidate=gate.candidate, baseline=gate.baseline,
                                     passed=gate.passed, summary=gate.summary,
                                     sizes=gate_sizes_to_pb(gate))  # fmt: skip
        return await self._change(sched_pb.ChangeRolloutRequest(gate=change))
