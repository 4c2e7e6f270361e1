"""The background worker that compacts long conversations (policy: domain/compaction.py).

The pipeline calls `consider` after it saved an answer. Deciding reads only the stored
per-message token counts; a compaction then runs in a task of its own: the small model, asked
through the platform itself (PickReplica on the summary pool, NodeService.Generate), folds the
old turns into a structured summary, its tokens are counted on the same node, and the store
takes it with a compare-and-set, so two gateways compacting one conversation never overwrite
each other. Choices made here (docs/decisions.md, "Compaction"):

- The branch compacted ends at the conversation's newest message; refused and empty messages
  are left out, as in every prompt. A summary whose last folded message is not on the branch
  a prompt is built for (the user edited an older message) is ignored for that prompt, pinned
  constraints included: both may describe turns that branch never had.
- The pick goes as the Free tier and compaction waits while the ladder caps answers (rung 2
  and up): background work must not take GPU time from users being shed.
- Folded turns the summary pool's context cannot hold at once stay verbatim; the summary
  covers the oldest that fit, and the rest is folded by a later pass.
- When the pool cannot answer, every compaction pauses for `retry_after_s` and a later
  message tries again; nothing is written. At most `max_concurrent` run at a time, and a
  conversation that would exceed that is skipped, not queued: its next message asks again.
- Summary and pinned counts come from the summarizing node's tokenizer; when the serving
  model's differs, they are close, not exact, like any count across models.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from domain.compaction import (
    REQUEST_MARGIN_TOKENS,
    TURN_OVERHEAD_TOKENS,
    CompactionPolicy,
    Split,
    SummaryRequest,
    fold_fitting,
    parse_pinned,
    render_anchor,
    render_summary,
    summary_body,
    summary_request,
    tidy_summary,
)
from domain.errors import NotFound, Unavailable
from domain.types import Finish, Role, Tier, Turn
from gateway.ports import (
    Chunk,
    GenerateSpec,
    Generation,
    Nodes,
    ReplicaPick,
    ReplicaPicker,
    StreamBroken,
    Working,
)
from gateway.stored_context import as_turn, branch, folded_count
from store.base import SummaryStore
from store.records import ConversationRecord, MessageRecord

# The ladder rung from which compaction waits: answers are being capped for users.
PAUSE_AT_RUNG = 2
# Low: a summary restates, it does not create.
SUMMARY_TEMPERATURE = 0.2
# A context size to assume when the scheduler does not report the replica's.
UNKNOWN_CONTEXT_TOKENS = 4096


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """A conversation as one decision read it."""

    user_id: str
    conversation: ConversationRecord
    chain: list[MessageRecord]
    folded: int

    @property
    def turns(self) -> list[Turn]:
        return [as_turn(m) for m in self.chain]


class _Deferred(Exception):
    """The summary pool cannot take the work now; a later message tries again."""


class Compactor:
    def __init__(
        self,
        store: SummaryStore,
        scheduler: ReplicaPicker,
        nodes: Nodes,
        policy: CompactionPolicy | None = None,
        summary_pool: str = "small",
        max_concurrent: int = 2,
        clock: Callable[[], float] = time.monotonic,
        retry_after_s: float = 30.0,
        generate_timeout_s: float = 120.0,
    ) -> None:
        self._store = store
        self._scheduler = scheduler
        self._nodes = nodes
        self._policy = policy or CompactionPolicy()
        self._pool = summary_pool
        self._max_concurrent = max_concurrent
        self._clock = clock
        self._retry_after_s = retry_after_s
        self._generate_timeout_s = generate_timeout_s
        self._running: dict[tuple[str, str], asyncio.Task[None]] = {}
        # Conversations being decided on: two messages' decisions must not both schedule one.
        self._deciding: set[tuple[str, str]] = set()
        self._paused_until = float("-inf")
        self._closed = False
        self._log = structlog.get_logger(component="compactor")

    async def consider(
        self,
        user_id: str,
        conversation_id: str,
        window_tokens: int,
        answer_reserve: int,
        system_tokens: int,
    ) -> bool:
        """Schedules a compaction of the conversation when its policy says so; True when one
        was started. Never raises (except cancellation): compaction is an optimisation.

        window_tokens and answer_reserve: those the last prompt was built with (the tier's
        window capped by the serving model's context); system_tokens: its system prompt's.
        """
        key = (user_id, conversation_id)
        if self._closed or key in self._running or key in self._deciding:
            return False
        if self._clock() < self._paused_until or len(self._running) >= self._max_concurrent:
            return False  # a later message asks again
        self._deciding.add(key)
        try:
            snapshot = await self._read(user_id, conversation_id, window_tokens - answer_reserve,
                                        system_tokens)  # fmt: skip
            if snapshot is None or not self._needed(
                snapshot, window_tokens, answer_reserve, system_tokens
            ):
                return False
            return self._schedule(key, snapshot)
        except NotFound:
            return False  # deleted meanwhile: nothing to compact
        except Exception:
            self._log.exception("could not decide on compaction", conversation=conversation_id)
            return False
        finally:
            self._deciding.discard(key)

    async def wait_idle(self) -> None:
        """Returns once no compaction is running (tests, and a graceful shutdown)."""
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    async def close(self) -> None:
        """Cancels running compactions and waits for them; nothing half-done is written."""
        self._closed = True
        for task in self._running.values():
            task.cancel()
        await self.wait_idle()

    # Deciding -----------------------------------------------------------------------------------

    async def _read(
        self, user_id: str, conversation_id: str, budget_tokens: int, system_tokens: int
    ) -> _Snapshot | None:
        """The conversation and its current branch; None when it cannot need compacting."""
        conversation = await self._store.get_conversation(user_id, conversation_id)
        # Without a summary, every message ever saved (all branches) bounds the prompt: most
        # conversations stop here, on one row, without reading their messages.
        bound = system_tokens + conversation.total_tokens
        if not conversation.summary and bound < self._policy.threshold_share * budget_tokens:
            return None
        messages = await self._store.list_messages(user_id, conversation_id)
        if not messages:
            return None
        # The newest message is the tip: the branch the conversation is going on with.
        chain = branch(messages, messages[-1])
        return _Snapshot(user_id, conversation, chain, folded_count(conversation, chain))

    def _needed(
        self, snapshot: _Snapshot, window_tokens: int, answer_reserve: int, system_tokens: int
    ) -> bool:
        conversation, compacted = snapshot.conversation, snapshot.folded > 0
        return self._policy.needs_compaction(
            window_tokens=window_tokens,
            answer_reserve_tokens=answer_reserve,
            system_tokens=system_tokens,
            summary_tokens=conversation.summary_tokens if compacted else 0,
            pinned_tokens=conversation.pinned_tokens if compacted else 0,
            since_summary=snapshot.turns[snapshot.folded :],
            compacted=compacted,
        )

    def _schedule(self, key: tuple[str, str], snapshot: _Snapshot) -> bool:
        if len(self._running) >= self._max_concurrent:
            self._log.info("compaction skipped: workers busy", conversation=key[1])
            return False
        task = asyncio.create_task(self._guarded(snapshot), name=f"compact-{key[1]}")
        self._running[key] = task
        task.add_done_callback(lambda _: self._running.pop(key, None))
        return True

    async def _guarded(self, snapshot: _Snapshot) -> None:
        conversation_id = snapshot.conversation.conversation_id
        started = self._clock()
        try:
            await self._compact(snapshot)
        except (_Deferred, Unavailable) as error:
            self._paused_until = self._clock() + self._retry_after_s
            self._log.warning("compaction deferred", conversation=conversation_id,
                              pool=self._pool, reason=str(error))  # fmt: skip
        except NotFound:
            self._log.info("conversation deleted while compacting", conversation=conversation_id)
        except Exception:
            self._log.exception("compaction failed", conversation=conversation_id)
        else:
            self._log.info("compaction pass ended", conversation=conversation_id,
                           seconds=round(self._clock() - started, 2))  # fmt: skip

    # Compacting ---------------------------------------------------------------------------------

    async def _compact(self, snapshot: _Snapshot) -> None:
        turns = snapshot.turns
        split = self._policy.split(turns, snapshot.folded)
        pick = await self._pick(snapshot, sum(t.tokens for t in split.folded))
        previous = self._previous_summary(snapshot)
        split, fixed_tokens = await self._fitting(pick, split, previous)
        if not split.folded:
            self._log.warning("nothing fits the summarizer's context",
                              conversation=snapshot.conversation.conversation_id)  # fmt: skip
            return
        request = summary_request(self._policy, split.folded, previous)
        prompt_tokens = fixed_tokens + sum(t.tokens + TURN_OVERHEAD_TOKENS for t in split.folded)
        text = await self._generate(pick, snapshot, request, prompt_tokens)
        if not text:
            # Nothing is stored and the pool is fine: the next message tries again.
            self._log.warning("the summarizer wrote nothing",
                              conversation=snapshot.conversation.conversation_id)  # fmt: skip
            return
        await self._store_summary(pick, snapshot, split, text)

    def _previous_summary(self, snapshot: _Snapshot) -> str:
        if snapshot.folded == 0:
            return ""
        return summary_body(snapshot.conversation.summary, snapshot.chain[0].content)

    async def _pick(self, snapshot: _Snapshot, folded_tokens: int) -> ReplicaPick:
        pick = await self._scheduler.pick(
            # Its own id: the summarizer's prompt shares no prefix with the conversation.
            f"{snapshot.conversation.conversation_id}:compact",
            self._pool,
            Tier.FREE,
            folded_tokens + REQUEST_MARGIN_TOKENS,
        )
        if pick.ladder_rung >= PAUSE_AT_RUNG:
            raise _Deferred(f"the ladder is at rung {pick.ladder_rung}")
        return pick

    async def _fitting(self, pick: ReplicaPick, split: Split, previous: str) -> tuple[Split, int]:
        """The split, folding only what the summarizer's context holds beside its answer,
        and the tokens of the request without the folded turns."""
        empty = summary_request(self._policy, (), previous)
        fixed = sum(await self._tokenize(pick, [empty.instruction, empty.material]))
        context = pick.context_tokens or UNKNOWN_CONTEXT_TOKENS
        room = context - self._policy.summary_max_tokens - fixed - REQUEST_MARGIN_TOKENS
        return split.fold_only(fold_fitting(split.folded, room)), fixed

    async def _generate(
        self,
        pick: ReplicaPick,
        snapshot: _Snapshot,
        request: SummaryRequest,
        prompt_tokens: int,
    ) -> str:
        spec = GenerateSpec(
            request_id=f"compact/{snapshot.user_id}/{snapshot.conversation.conversation_id}/"
            f"{uuid.uuid4().hex[:8]}",
            turns=[
                Turn(Role.SYSTEM, request.instruction, 0),
                Turn(Role.USER, request.material, 0),
            ],
            max_tokens=self._policy.summary_max_tokens,
            tier=Tier.FREE,
            temperature=SUMMARY_TEMPERATURE,
            prompt_tokens=prompt_tokens,
        )
        generation: Generation | None = None
        finished = False
        try:
            async with asyncio.timeout(self._generate_timeout_s):
                generation = await self._nodes.generate(pick.address, spec)
                pieces, finish = await _read_answer(generation)
            finished = True
        except StreamBroken as error:
            raise Unavailable(f"the summarizer failed: {error}") from error
        except TimeoutError as error:
            raise Unavailable(f"no summary within {self._generate_timeout_s} s") from error
        finally:
            if generation is not None:
                if not finished:
                    await generation.cancel()
                generation.close()
        if finish not in (Finish.STOP, Finish.LENGTH):
            raise Unavailable(f"the summarizer ended with {finish.value}")
        return tidy_summary("".join(pieces), cut_at_length=finish is Finish.LENGTH)

    async def _tokenize(self, pick: ReplicaPick, texts: list[str]) -> list[int]:
        return await self._nodes.tokenize(pick.address, texts, pick.model)

    async def _store_summary(
        self,
        pick: ReplicaPick,
        snapshot: _Snapshot,
        split: Split,
        text: str,
    ) -> None:
        conversation = snapshot.conversation
        earlier = parse_pinned(conversation.pinned) if snapshot.folded else ()
        constraints = self._policy.merge_pinned(earlier, split.pinned)
        task = snapshot.chain[0].content
        pinned = render_anchor(task, constraints, self._policy.task_anchor_chars)
        summary = render_summary(task, text)
        counts = await self._tokenize(pick, [summary, pinned])
        upto_seq = snapshot.chain[split.fold_end - 1].seq
        written = await self._store.set_summary(
            snapshot.user_id, conversation.conversation_id, summary, counts[0], upto_seq,
            pinned, counts[1], expected_upto_seq=conversation.summary_upto_seq,
        )  # fmt: skip
        self._log.info("compacted" if written else "compaction lost to another worker",
                       conversation=conversation.conversation_id, upto_seq=upto_seq,
                       summary_tokens=counts[0], folded=len(split.folded))  # fmt: skip


async def _read_answer(generation: Generation) -> tuple[list[str], Finish]:
    pieces: list[str] = []
    while True:
        item = await generation.read()
        if type(item) is Working:
            continue
        if type(item) is not Chunk:
            return pieces, item.finish
        pieces.append(item.text)
