"""The gateway's typed client of the schedulers: one pick, in plain values, from a live one.

Every scheduler holds the same table (each node reports to all of them), so any one can pick.
A pick goes to the scheduler that answered last; one that cannot be reached is set aside for
a cooldown and the pick is asked again at once of the next, so a dead scheduler costs the
message one failed connection attempt, not an answer.

Picks go over one held stream per scheduler (gateway/pick_stream.py); a scheduler that does
not serve the stream, or `pick_stream=False`, is asked by a PickReplica call each time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import grpc

from chat.v1 import scheduler_service_pb2 as pb
from chat.v1 import scheduler_service_pb2_grpc as pb_grpc
from domain.errors import InvalidArgument, NoReplica, Unavailable
from domain.feedback import RatedAnswer
from domain.guardrails import Tally
from domain.rollout import RolloutState
from domain.types import Tier
from gateway.pick_stream import PickStream, PickStreamLost, call_detail
from gateway.ports import ReplicaPick
from infra.convert import TIER_TO_PB
from infra.keepalive import CLIENT_CHANNEL
from infra.rollout_convert import ratings_to_pb, rollout_from_pb, tallies_to_pb
from infra.status import REASON_NO_REPLICA, CallFailure
from infra.tls import TlsConfig
from infra.tls_channel import open_channel

CHANNEL_OPTIONS = CLIENT_CHANNEL


def pick_from_wire(data: bytes) -> ReplicaPick:
    """A pick serialized as PickReplicaResponse (how earlier releases kept it in Redis)."""
    return _from_pb(pb.PickReplicaResponse.FromString(data))


def _from_pb(answer: pb.PickReplicaResponse) -> ReplicaPick:
    return ReplicaPick(answer.node_id, answer.address, answer.model, answer.ladder_rung,
                       answer.expected_wait_seconds, answer.context_tokens)  # fmt: skip


class SchedulerClient:
    def __init__(
        self,
        addresses: Sequence[str],
        rpc_timeout_s: float = 5.0,
        down_for_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        tls: TlsConfig | None = None,
        pick_stream: bool = True,
    ) -> None:
        if not addresses:
            raise ValueError("at least one scheduler address is needed")
        # The gateway's certificate (None: plaintext).
        self._channels = [open_channel(address, tls, CHANNEL_OPTIONS) for address in addresses]
        self._stubs = [pb_grpc.SchedulerServiceStub(c) for c in self._channels]
        self._addresses = list(addresses)
        self._rpc_timeout_s = rpc_timeout_s
        self._down_for_s = down_for_s
        self._clock = clock
        # The scheduler that answered last is asked first; the others when it cannot be reached.
        self._current = 0
        self._down_until = [float("-inf")] * len(addresses)
        # A held pick stream per scheduler; None: that scheduler is asked by call.
        self._streams: list[PickStream | None] = [
            PickStream(stub) if pick_stream else None for stub in self._stubs
        ]

    async def pick(
        self,
        conversation_id: str,
        pool: str,
        tier: Tier,
        prompt_tokens: int,
        reusable_prefix_tokens: int = 0,
        exclude_node_ids: Sequence[str] = (),
        model: str = "",
    ) -> ReplicaPick:
        request = pb.PickReplicaRequest(
            conversation_id=conversation_id,
            pool=pool,
            tier=TIER_TO_PB[tier],
            prompt_tokens=prompt_tokens,
            reusable_prefix_tokens=max(0, reusable_prefix_tokens),
            exclude_node_ids=list(exclude_node_ids),
            model=model,
        )
        unreachable: list[str] = []
        for index in self._order():
            try:
                answer = await self._ask(index, request)
            except _Unreachable as failure:
                self._down_until[index] = self._clock() + self._down_for_s
                unreachable.append(f"{self._addresses[index]}: {failure}")
                continue
            except (InvalidArgument, NoReplica):
                self._current = index  # it answered: a refusal, passed on
                raise
            self._current = index
            return _from_pb(answer)
        raise Unavailable(f"no scheduler is reachable ({'; '.join(unreachable)})")

    async def _ask(self, index: int, request: pb.PickReplicaRequest) -> pb.PickReplicaResponse:
        """The pick of scheduler index; InvalidArgument or NoReplica when it refuses,
        _Unreachable when it cannot be asked."""
        stream = self._streams[index]
        if stream is not None:
            try:
                answer = await stream.pick(request, self._rpc_timeout_s)
            except PickStreamLost as lost:
                if lost.timed_out:
                    raise _Unreachable(lost.detail) from lost
                if lost.unimplemented:
                    self._streams[index] = None
                    await stream.close()
                # Else the stream broke (the scheduler restarted, or died): a call says which,
                # and answers if it can; the next pick opens a new stream.
            else:
                return _made(answer)
        try:
            return await self._stubs[index].PickReplica(request, timeout=self._rpc_timeout_s)
        except grpc.aio.AioRpcError as error:
            if _answered(error):
                raise _refusal(error) from error
            raise _Unreachable(call_detail(error)) from error

    def _order(self) -> list[int]:
        """The current scheduler, then the others in turn; those set aside go last, so a pick
        still tries them when every scheduler is down."""
        count = len(self._stubs)
        turn = [(self._current + step) % count for step in range(count)]
        now = self._clock()
        return [i for i in turn if self._down_until[i] <= now] + [
            i for i in turn if self._down_until[i] > now
        ]

    async def rollout(
        self, known_revision: int, tallies: dict[tuple[str, Tier], Tally], wait_s: float = 0.0,
        ratings: Sequence[RatedAnswer] = (),
    ) -> tuple[int, RolloutState | None]:  # fmt: skip
        """The rollout's revision, and its state when it is newer than known_revision; this
        gateway's answers per version and users' ratings since the last call go with the
        question. wait_s: the scheduler holds the call that long while known_revision is
        current."""
        request = pb.GetRolloutRequest(known_revision=known_revision,
                                       tallies=tallies_to_pb(tallies),
                                       wait_ms=round(wait_s * 1000),
                                       ratings=ratings_to_pb(ratings))  # fmt: skip
        timeout_s = self._rpc_timeout_s + wait_s
        unreachable: list[str] = []
        for index in self._order():
            try:
                answer = await self._stubs[index].GetRollout(request, timeout=timeout_s)
            except grpc.aio.AioRpcError as error:
                unreachable.append(f"{self._addresses[index]}: {error.code().name}")
                continue
            state = rollout_from_pb(answer.rollout) if answer.HasField("rollout") else None
            return answer.revision, state
        raise Unavailable(f"no scheduler answered for the rollout ({'; '.join(unreachable)})")

    async def close(self) -> None:
        for stream in self._streams:
            if stream is not None:
                await stream.close()
        for channel in self._channels:
            await channel.close()


class _Unreachable(Exception):
    """A scheduler that could not be asked (a failed call or stream), not one that refused."""


def _made(answer: pb.PickReplicasResponse) -> pb.PickReplicaResponse:
    """The pick a stream's answer carries, or its refusal raised as PickReplica's would be."""
    if answer.refusal == pb.PICK_REFUSAL_INVALID_ARGUMENT:
        raise InvalidArgument(answer.detail or "the scheduler refused the pick")
    if answer.refusal == pb.PICK_REFUSAL_NO_REPLICA:
        raise NoReplica(answer.detail or "no replica is ready")
    return answer.pick


def _answered(error: grpc.aio.AioRpcError) -> bool:
    """Whether the scheduler itself answered (a refusal to pass on), rather than the call
    failing on the way (a scheduler to skip)."""
    code = error.code()
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return True
    return code == grpc.StatusCode.UNAVAILABLE and CallFailure(error).reason == REASON_NO_REPLICA


def _refusal(error: grpc.aio.AioRpcError) -> Exception:
    if error.code() == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidArgument(error.details() or "the scheduler refused the pick")
    return NoReplica(error.details() or "no replica is ready")
