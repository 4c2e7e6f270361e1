"""Runs shared by every gateway through Redis (gateway/shared_runs.py holds the keys): a
retry at any gateway follows the first attempt, a stop reaches the gateway that writes the
answer, and the answers of a gateway that died are taken over by the others and continued
from the text already in their log.

A reader that comes to this gateway for a run another one owns usually comes because its
stream from the owner broke: the owner's address is probed then, and whenever the run's log
goes quiet, so a killed owner's runs are taken over at once rather than when its liveness
runs out (gateway/owner_probe.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from domain.errors import Unavailable
from domain.types import User
from gateway.answers import Answer, AnswerPlan
from gateway.metrics import GatewayMetrics
from gateway.owner_probe import reachable_from, refuses_connections
from gateway.redis_buckets import UNAVAILABLE as REDIS_UNAVAILABLE
from gateway.run_sharing import LOCAL_CLAIM, Claim, FollowedRun, OwnershipLost, Resume
from gateway.runs import Event, MessageRun, RunRegistry, shown_pieces
from gateway.shared_runs import RemoteRun, SharedRuns

# How soon a write to a run's log that could not reach Redis is tried again.
LOG_RETRY_S = 0.1


@dataclass(slots=True)
class _SharedClaim:
    sharing: RedisRunSharing
    user_id: str
    message_id: str
    held: FollowedRun | None = None

    async def publish(
        self, run: MessageRun, plan: AnswerPlan, answer_parent_seq: int | None
    ) -> None:
        await self.sharing.shared.record_plan(self.user_id, self.message_id, plan,
                                              answer_parent_seq)  # fmt: skip
        run.sink = self.sharing.sink(self.user_id, self.message_id)

    async def release(self) -> None:
        await self.sharing.shared.release(self.user_id, self.message_id)


class RedisRunSharing:
    def __init__(self, shared: SharedRuns, runs: RunRegistry, metrics: GatewayMetrics) -> None:
        self.shared = shared
        self._runs = runs
        self._metrics = metrics
        # Runs this gateway left because their log could not be reached (user id, message id):
        # if no other gateway took them over meanwhile (Redis itself was away, not just the
        # link to it), this one takes them back once Redis answers, or nobody would.
        self._left: set[tuple[str, str]] = set()
        # Where this gateway serves gRPC, as others probe it ('' until start() names it).
        self._address = ""
        self._log = structlog.get_logger(component="run-sharing")

    async def claim(
        self, user_id: str, message_id: str, fingerprint: str, conversation_id: str, resume: Resume
    ) -> Claim:
        try:
            held = await self.shared.claim(user_id, message_id, fingerprint, conversation_id)
        except REDIS_UNAVAILABLE as error:
            # Answering matters more than sharing: this run lives here only, as if Redis
            # were not configured (a retry at another gateway could run the model again).
            self._log.warning("runs not shared: redis unreachable", error=str(error))
            return LOCAL_CLAIM
        claim = _SharedClaim(self, user_id, message_id)
        if held is not None:
            await self._take_over_if_owner_gone(user_id, message_id, resume)
            claim.held = self._remote(user_id, message_id, held.fingerprint, resume)
        return claim

    def sink(self, user_id: str, message_id: str) -> Callable[[int, Event], Awaitable[None]]:
        """Writes each of the run's events to the shared log before local followers see it.

        While Redis cannot be reached the write is tried again, and the answer waits: its log
        must stay whole for resumes and takeovers. Past the gateway's liveness window the other
        gateways take this one for dead and take its run over from the log, so the run is
        left to them (OwnershipLost), as if this gateway had died; if none could (Redis itself
        was away), this gateway takes the run back when Redis answers (`reclaim_left`)."""
        shared, log, left = self.shared, self._log, self._left

        async def write(event_id: int, event: Event) -> None:
            loop = asyncio.get_running_loop()
            give_up_at = loop.time() + shared.config.liveness_s
            while True:
                try:
                    await shared.append(user_id, message_id, event_id, event)
                    return
                except REDIS_UNAVAILABLE as error:
                    if loop.time() >= give_up_at:
                        left.add((user_id, message_id))
                        raise OwnershipLost(f"the run's log was unreachable: {error}") from error
                    log.warning("run log unreachable; writing again", message_id=message_id,
                                event_id=event_id, error=str(error))  # fmt: skip
                    await asyncio.sleep(LOG_RETRY_S)

        return write

    async def end(self, run: MessageRun) -> None:
        if run.sink is None:
            return
        try:
            await self.shared.end(run.user_id, run.message_id)
        except REDIS_UNAVAILABLE as error:
            # Its keys expire after running_ttl_s; its log may lack the last event.
            self._log.warning("run's end not recorded: redis unreachable",
                              message_id=run.message_id, error=str(error))  # fmt: skip

    async def find(self, user_id: str, message_id: str, resume: Resume) -> FollowedRun | None:
        try:
            existing = await self.shared.exists(user_id, message_id)
        except REDIS_UNAVAILABLE as error:
            # UNAVAILABLE, not an unexpected error: the edge asks another gateway.
            raise Unavailable(f"answers in flight are unreachable: {error}") from error
        if existing is None:
            return None
        if existing.owner != self.shared.gateway_id:
            await self._take_over_if_owner_gone(user_id, message_id, resume)
        return self._remote(user_id, message_id, existing.fingerprint, resume)

    async def ask_stop(self, user_id: str, message_id: str) -> bool | None:
        if await self.shared.exists(user_id, message_id) is None:
            return None
        return await self.shared.ask_stop(user_id, message_id)

    def _remote(self, user_id: str, message_id: str, fingerprint: str, resume: Resume) -> RemoteRun:
        def on_idle() -> Awaitable[None]:
            return self._take_over_if_owner_gone(user_id, message_id, resume)

        return RemoteRun(self.shared, user_id, message_id, fingerprint, on_idle)

    # Takeover ------------------------------------------------------------------------------------

    async def _take_over_if_owner_gone(self, user_id: str, message_id: str, resume: Resume) -> None:
        """Takes the run over when its owner is dead: its liveness ran out, or the address it
        names refuses connections (then its liveness is ended for every gateway's sweep)."""
        try:
            owner = await self.shared.owner_address(user_id, message_id)
        except REDIS_UNAVAILABLE as error:
            raise Unavailable(f"answers in flight are unreachable: {error}") from error
        if owner is not None:
            owner_id, address = owner
            if not await self._gone(owner_id, address):
                return
            self._metrics.owners_found_gone.inc()
            self._log.warning("a run's gateway refuses connections: taken for dead",
                              gateway=owner_id, address=address)  # fmt: skip
        await self.take_over(user_id, message_id, resume)

    async def _gone(self, owner_id: str, address: str) -> bool:
        """Whether the owner refuses connections at its address; its liveness is ended then."""
        return (
            owner_id != self.shared.gateway_id
            and bool(self._address)
            and reachable_from(address, self._address)
            and await refuses_connections(address)
            and await self.shared.forget_gateway(owner_id, address)
        )

    async def take_over(
        self, user_id: str, message_id: str, resume: Resume, reclaim: bool = False
    ) -> None:
        """Continues a run whose gateway died, from the text in its log; does nothing when
        the owner is alive, the run ended, or another gateway got there first. With reclaim:
        a run this gateway left, taken back only if it is still its own."""
        orphan = await self.shared.take_over(user_id, message_id, reclaim)
        if orphan is None:
            return
        events = await self.shared.read_all(user_id, message_id)
        run = MessageRun(user_id, orphan.conversation_id, message_id, orphan.fingerprint, events)
        if run.ended:
            # The owner died after the answer's last event, which it writes after saving.
            await self.shared.end(user_id, message_id)
            return
        run.sink = self.sink(user_id, message_id)
        if orphan.stop_requested:
            run.stop_requested.set()
        self._runs.add(run)
        # What the log's reader was left with: after a retract, the refusal alone (if any).
        pieces, withdrawn = shown_pieces(events)
        # The log keeps what was shown, not token counts: the writer counts them.
        answer = Answer(served_by=orphan.plan.pick, pieces=pieces, shown=list(pieces),
                        withdrawn=withdrawn)  # fmt: skip
        self._metrics.takeovers.inc()
        self._log.info("took back a run left while redis was away" if reclaim
                       else "took over a run whose gateway died", message_id=message_id,
                       events=len(events))  # fmt: skip
        resume(run, User(user_id, orphan.plan.tier), orphan.plan, orphan.answer_parent_seq, answer)

    async def sweep_orphans(self, resume: Resume) -> int:
        """Takes over every run whose gateway died; how many were found."""
        found = await self.shared.orphans()
        for user_id, message_id in found:
            await self.take_over(user_id, message_id, resume)
        return len(found)

    async def reclaim_left(self, resume: Resume) -> int:
        """Takes back the runs this gateway left while Redis was away and nobody took over;
        how many were looked at. Raises while Redis is still away (they are kept for later)."""
        left = list(self._left)
        for user_id, message_id in left:
            await self.take_over(user_id, message_id, resume, reclaim=True)
            self._left.discard((user_id, message_id))
        return len(left)

    async def relay_stop(self, user_id: str, message_id: str) -> None:
        """A stop asked at another gateway for a run this one writes."""
        run = self._runs.get(user_id, message_id)
        if run is not None and not run.ended:
            run.stop_requested.set()

    # Background work ----------------------------------------------------------------------------

    def start(self, resume: Resume, address: str = "") -> list[asyncio.Task[None]]:
        """This gateway's liveness, stops asked elsewhere, and the sweep for dead gateways'
        runs; cancel the tasks to stop them. address: where this gateway serves gRPC, which
        other gateways probe when it may have died ('' names none: they wait out its
        liveness)."""
        self._address = address
        return [
            asyncio.create_task(self.shared.keep_alive(address), name="liveness"),
            asyncio.create_task(self.shared.watch_stops(self.relay_stop), name="stops"),
            asyncio.create_task(self._sweep_forever(resume), name="sweeper"),
        ]

    async def _sweep_forever(self, resume: Resume) -> None:
        while True:
            await asyncio.sleep(self.shared.config.sweep_interval_s)
            try:
                await self.sweep_orphans(resume)
                await self.reclaim_left(resume)
            except REDIS_UNAVAILABLE as error:
                self._log.warning("orphan sweep skipped: redis unreachable", error=str(error))

    async def retire(self, tasks: list[asyncio.Task[None]]) -> None:
        """At shutdown, after every run ended: the tasks stop and nothing is left to take over."""
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.shared.retire()
