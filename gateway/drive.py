"""Writing a planned answer, in a task of its own that goes on when the client has gone: the
meta event, the answer from the engines (gateway/answers.py), then saving it, settling the
bucket, charging the daily allowance, the metrics and the version's guardrails, the run's
end, the prompt captured, and the compactor asked to consider the conversation."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from domain import limiter
from domain.breaker import Breakers
from domain.errors import Unavailable
from domain.scores import tokens_per_s
from domain.types import Finish, Role, User
from gateway.answers import Answer, AnswerPlan, AnswerWriter
from gateway.buckets import Buckets
from gateway.compactor import Compactor
from gateway.ids import ANSWER_SUFFIX
from gateway.metrics import GatewayMetrics
from gateway.ports import Budget
from gateway.prompt_capture import PromptCapture
from gateway.run_sharing import OwnershipLost, RunSharing
from gateway.runs import Done, Event, Failed, FailureCode, MessageRun, Meta, RunRegistry
from gateway.versions import VersionBook
from store.base import ConversationStore
from store.records import NewMessage


@dataclass(frozen=True, slots=True)
class Accounts:
    """Where a finished answer is accounted for: the user's bucket and daily allowance, the
    metrics and the serving version's guardrails."""

    buckets: Buckets
    budget: Budget
    metrics: GatewayMetrics
    versions: VersionBook


class RunDriver:
    def __init__(
        self,
        store: ConversationStore,
        writer: AnswerWriter,
        accounts: Accounts,
        breakers: Breakers,
        runs: RunRegistry,
        sharing: RunSharing,
        compactor: Compactor | None,
        region: str,
        prompts: PromptCapture,
    ) -> None:
        self._store = store
        self._prompts = prompts
        self._writer = writer
        self._accounts = accounts
        self._breakers = breakers
        self._runs = runs
        self._sharing = sharing
        # None: conversations are never compacted; the oldest turns simply drop out.
        self._compactor = compactor
        # This gateway's region, named in each meta event and stored answer ('' with one).
        self._region = region
        self._tasks: set[asyncio.Task[None]] = set()
        self._log = structlog.get_logger(component="pipeline")

    def start(self, run: MessageRun, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"run-{run.message_id}")
        run.task = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drive(
        self,
        run: MessageRun,
        user: User,
        plan: AnswerPlan,
        answer_parent_seq: int | None,
        store_answer: bool = True,
        resumed: Answer | None = None,
    ) -> None:
        """Writes the answer, saves it, settles the bucket, ends the run. A resumed answer
        (taken over from a dead gateway) goes on from the text already in the log."""
        answer = resumed or Answer(served_by=plan.pick)
        ending: Event
        try:
            if resumed is None:
                await run.append(self._meta(run, plan))
            await self._writer.write(run, plan, answer)
            ending = Done(answer.finish, answer.usage)
        except Unavailable as error:
            ending = Failed(FailureCode.UNAVAILABLE, error.reason)
        except OwnershipLost as lost:
            # Another gateway took this run over (this one was thought dead), or will: it
            # saves, settles and ends the answer; writing more here would only repeat it.
            # Whoever follows it here attaches there.
            self._log.warning("run left to another gateway", message_id=run.message_id,
                              reason=str(lost))  # fmt: skip
            await run.abandon()
            self._runs.discard(run)
            return
        if store_answer:
            try:
                await self._save_answer(run, user, answer_parent_seq, answer)
            except Exception:
                # Whatever the store did, the client's stream must still end; the answer it
                # read is logged as unsaved for the operator.
                self._log.exception("answer not saved", message_id=run.message_id)
        await self._account(run, user, plan, answer)
        if not await self._end(run, ending):
            return
        if store_answer:  # after `done`: the user never waits for the capture
            await self._prompts.keep(user, run.conversation_id, run.message_id, plan, answer)
        if store_answer and self._compactor is not None:
            # After `done`: the user never waits for this; it reads one row when nothing is due.
            system_tokens = plan.prompt.turns[0].tokens
            await self._compactor.consider(user.user_id, run.conversation_id, plan.window_tokens,
                                           plan.max_answer_tokens, system_tokens)  # fmt: skip

    def _meta(self, run: MessageRun, plan: AnswerPlan) -> Meta:
        pick = plan.pick
        self._log.info("answer started", message_id=run.message_id, version=plan.version,
                       pool=plan.pool, model=pick.model, downgraded=plan.downgraded,
                       pool_reason=plan.pool_reason)  # fmt: skip
        return Meta(run.message_id, run.conversation_id, pick.model, pick.node_id, self._region,
                    plan.region_notice, version=plan.version, downgraded=plan.downgraded,
                    slice=plan.slice, pool=plan.pool, pool_reason=plan.pool_reason)  # fmt: skip

    async def _account(self, run: MessageRun, user: User, plan: AnswerPlan, answer: Answer) -> None:
        accounts = self._accounts
        await accounts.buckets.settle(
            user.user_id, user.tier, plan.reserved, limiter.usage_cost(answer.usage)
        )
        await accounts.budget.charge(user, plan.pool, answer.usage)
        self._observe(run, user, plan.pool, answer, plan.version)
        if answer.finish is not Finish.ERROR:
            self._breakers.of(plan.pool).record_success()

    async def _end(self, run: MessageRun, ending: Event) -> bool:
        """Appends the last event and ends the run; False when another gateway owns it now."""
        try:
            await run.append(ending)
        except OwnershipLost:
            await run.abandon()
            self._runs.discard(run)
            return False
        except Unavailable as error:
            # The shared log takes no more (Redis away): the run still ends, for the followers
            # here at least, rather than staying open forever.
            self._log.warning("answer ended here only", message_id=run.message_id,
                              reason=error.reason)  # fmt: skip
            await run.append_here(ending)
        self._runs.mark_ended(run)
        await self._sharing.end(run)
        return True

    def _observe(
        self, run: MessageRun, user: User, pool: str, answer: Answer, version: str
    ) -> None:
        metrics, versions = self._accounts.metrics, self._accounts.versions
        first, now = run.first_text_at, time.monotonic()
        ttft = None if first is None else first - run.started_at
        stream_s = 0.0 if first is None else now - first
        metrics.observe_answer(user.tier, pool, answer.served_by.model, ttft, stream_s,
                               answer.usage, answer.finish.value)  # fmt: skip
        if version:
            rate = tokens_per_s(answer.usage.output_tokens, now - run.started_at)
            metrics.observe_version(version, user.tier, answer.finish.value, ttft, rate)
            versions.tally(version, user.tier, answer.finish.value, "".join(answer.shown),
                           ttft, rate, answer.failovers > 0)  # fmt: skip

    async def _save_answer(
        self, run: MessageRun, user: User, parent_seq: int | None, answer: Answer
    ) -> None:
        await self._store.add_message(
            user.user_id,
            run.conversation_id,
            NewMessage(
                message_id=run.message_id + ANSWER_SUFFIX,
                role=Role.ASSISTANT,
                content="".join(answer.shown),
                tokens=answer.usage.output_tokens,
                parent_seq=parent_seq,
                model=answer.served_by.model,
                # The replica that finished the answer; a failover is in the gateway's log.
                replica_id=answer.served_by.node_id,
                finish=answer.finish.value,
                region=self._region,
                parent_tokens=answer.message_tokens,
            ),
        )

    async def close(self, grace_s: float) -> None:
        """Lets running answers finish (and be saved), then cancels what is left."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace_s)
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._compactor is not None:
            await self._compactor.close()
