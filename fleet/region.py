"""The region's event loop: a region of simulated replicas in virtual time, on one core.

Events (a message arrives, a user's patience runs out, a replica dies, the scheduler notices,
the system prompt changes) sit in a heap. Time moves in load-report ticks (250 ms, as the node
agents report): within a tick the events are handled in time order, each advancing only the
replica it concerns; at the tick's end every replica catches up and reports its load to the
pool's PoolIndex, which is all the picker sees until the next report, as in the real scheduler.
Every 10 s the ladder ticks on the watched pool's busy share, and from rung 1 on the small
pool's too (domain.ladder.ladder_busy).

A replica's steps are domain.replica_sim's own; quiet decode stretches go by in one
fast_forward call (fleet.replicas), so the cost grows with messages and with steps in which
something happens, not with steps. Pure: no I/O; fleet.report writes the files.

A replica that dies stops at once; until the detection delay has passed (the scheduler misses
its reports for 2 s) it is still picked, and what is sent to it waits. Then each of its answers
moves: picked again among the living, its prompt plus the tokens already streamed is read on
the new replica, and the answer goes on from there. The pause is kill to next token.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Final

from domain import limiter
from domain.breaker import fallback_chain
from domain.ladder import LadderPolicy, LadderState, busy_share, ladder_busy, tick
from domain.pools import LARGE_POOL, SMALL_POOL
from domain.replica_requests import SimFinish, StepResult
from domain.router import RouteDecision
from domain.shedding import SheddingPolicy, refuse_at_door
from domain.start_wait import StartWaitModel
from domain.tiers import TierPolicy
from domain.types import NodeState, Tier
from fleet.events import EventQueue
from fleet.recorder import PLACED_AWAY, PLACED_HOME, Outcome, Recorder
from fleet.replicas import Pool, PoolSpec, SimReplica, Strategy, prefill_tokens_per_s
from fleet.sim_gateway import Conversation, Plan, SimGateway
from fleet.workload import ConversationPlan, Workload

# Kinds of event, the handlers' order in _run. Final: compiled in (fleet/compiled.py).
_ARRIVE: Final = 0
_GIVE_UP: Final = 1
_KILL: Final = 2
_DETECT: Final = 3
_FLUSH: Final = 4
_HANDED_OVER: Final = 5


@contextlib.contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """A region holds millions of long-lived objects (conversations, their turns, requests),
    and every full pass of Python's cycle collector walks all of them: about a fifth of the run
    went there. The simulation makes no reference cycles (tests/fleet/test_region.py checks),
    so reference counting frees everything and the collector has nothing to find."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        # Everything made meanwhile sits in the youngest generation, and the first allocation
        # after enable() would scan it all (seconds, for a region). Freezing and unfreezing
        # moves it to the oldest generation unscanned. (It would also thaw objects someone
        # froze on purpose; nothing in this project freezes any.)
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


@dataclass(frozen=True, slots=True)
class Failures:
    kill_at_s: tuple[float, ...] = ()  # a replica of the watched pool dies at each
    flush_at_s: tuple[float, ...] = ()  # the system prompt changes: every cached prefix is stale


@dataclass(frozen=True, slots=True)
class FleetConfig:
    pools: tuple[PoolSpec, ...]
    strategy: Strategy = Strategy.AFFINITY
    paid_first: bool = True  # Plus queues first on every replica; off: one queue, first come
    max_rung: int = 3  # the highest rung that takes effect; 0 turns the ladder off
    ladder: LadderPolicy = field(default_factory=LadderPolicy)
    shedding: SheddingPolicy = field(default_factory=SheddingPolicy)
    tiers: dict[Tier, TierPolicy] | None = None
    watched_pool: str = LARGE_POOL  # the scheduler ladders on this pool's busy share
    report_interval_s: float = 0.25
    ladder_interval_s: float = 10.0
    detection_s: float = 2.0
    failures: Failures = field(default_factory=Failures)


class _Message:
    """One message in flight, from the gateway's point of view."""

    __slots__ = (
        "answer_tokens",
        "arrival_s",
        "cached",
        "conversation",
        "first_token_s",
        "generated",
        "moved_at",
        "plan",
        "replica",
        "request_id",
    )

    def __init__(
        self,
        request_id: str,
        conversation: Conversation,
        plan: Plan,
        arrival_s: float,
        answer_tokens: int,
    ) -> None:
        self.request_id = request_id
        self.conversation = conversation
        self.plan = plan
        self.arrival_s = arrival_s
        self.answer_tokens = answer_tokens
        self.first_token_s = -1.0
        self.replica: SimReplica | None = None
        self.generated = 0  # tokens streamed on replicas that died since
        self.moved_at = -1.0  # when its replica died, until its next token
        self.cached = -1  # prompt tokens cached at its first admission


class Handover:
    """A message another region sends here: its conversation, and the score the router
    read it with there (drawn once: the same message is not scored twice)."""

    __slots__ = ("conversation", "score")

    def __init__(self, conversation: Conversation, score: float) -> None:
        self.conversation = conversation
        self.score = score


class Neighbours:
    """The other regions a message may go to instead of this one. A region alone has none,
    and keeps every message (fleet/regions.py's Spill sends some away)."""

    def redirect(
        self, region: FleetSim, now: float, conversation: Conversation, score: float, pool: str
    ) -> bool:
        """True when the message is not this region's to run: handed to another region, or
        refused as unreachable; `pool` is the one the router chose."""
        return False

    def pinned(self, user_id: str) -> bool:
        """Whether data residency keeps the user in their home region."""
        return False


class FleetSim:
    def __init__(
        self,
        config: FleetConfig,
        workload: Workload,
        duration_s: float,
        region: int = 0,
        neighbours: Neighbours | None = None,
    ) -> None:
        self.config = config
        self.region = region  # its index among several regions (fleet/regions.py)
        self.neighbours = neighbours or Neighbours()
        self.lost = False  # the whole region is gone (fleet/regions.py)
        self.workload = workload
        self.duration_s = duration_s
        # What the scheduler is configured with: answers hold their place about as long as the
        # workload's nominal answer streams, and Plus takes its share of the places that open.
        self.pools = {
            spec.name: Pool(
                spec,
                config.strategy,
                StartWaitModel(
                    prefill_tokens_per_s(spec.preset),
                    workload.spec.nominal_stream_s,
                    workload.spec.plus_share if config.paid_first else 0.0,
                ),
            )
            for spec in config.pools
        }
        names = frozenset(self.pools)
        self.gateway = SimGateway(
            names,
            workload.spec.system_prompt_tokens,
            config.shedding,
            config.tiers,
            workload.spec.score_threshold,
        )
        self.ladder = LadderState()
        self.recorder = Recorder(duration_s, tuple(self.pools))
        self._events = EventQueue(config.report_interval_s)
        self._live: dict[str, _Message] = {}
        self._waiting_on_dead: dict[str, list[_Message]] = {}  # node -> messages to move
        self._counted = {name: (0.0, 0) for name in self.pools}  # busy s, prefill tokens
        self._scheduled_until = 0.0
        self._ids = itertools.count()
        self._prepared = False

    # --- the loop ---

    def prepare(self) -> None:
        """Sets the fleet up at time 0: the conversations under way, their caches, the first
        second's arrivals, the failures to come. `run` does it when it was not done; a
        benchmark calls it first to time the start apart from the simulated minutes."""
        if self._prepared:
            return
        self._prepared = True
        with cyclic_gc_paused():
            self._start_mid_day()
            self._schedule_conversations(1.0)
            for at in self.config.failures.kill_at_s:
                self._push(at, _KILL, None)
            for at in self.config.failures.flush_at_s:
                self._push(at, _FLUSH, None)

    def run(self) -> Recorder:
        self.prepare()
        with cyclic_gc_paused():
            return self._run()

    def _run(self) -> Recorder:
        for k in range(1, self.ticks() + 1):
            self.run_tick(k)
        self.finish()
        return self.recorder

    def ticks(self) -> int:
        return math.ceil(self.duration_s / self.config.report_interval_s)

    def run_tick(self, k: int) -> None:
        """The events before the k-th load report, then the reports (and every
        ladder_interval_s, the ladder). Several regions run theirs in step, a tick each."""
        tick_s = self.config.report_interval_s
        # Typed as taking Any: each kind of event carries its own subject (mypyc checks).
        # Built per tick, not kept: a tuple of bound methods on self would be a cycle.
        handlers: tuple[Callable[[float, Any], None], ...] = (
            self._arrive,
            self._give_up,
            self._kill,
            self._detect,
            self._flush,
            self._handed_over,
        )
        events = self._events
        boundary = k * tick_s
        self._schedule_conversations(boundary + 1.0)
        events.start_tick(k)  # the events before the boundary
        event = events.pop_due()
        while event is not None:
            at, _, kind, subject = event
            handlers[kind](at, subject)
            event = events.pop_due()
        self._report(boundary, tick_s)
        if k % round(self.config.ladder_interval_s / tick_s) == 0:
            self._tick_ladder(boundary)

    def finish(self) -> None:
        """Past the last tick: the answers moved off dead replicas run to their end."""
        self._finish_moves(self.duration_s + 120.0)

    def _start_mid_day(self) -> None:
        """Opens the conversations under way at time 0 with their last turns in the prefix
        cache: the latest-coming first, so the soonest to come back are the most recent."""
        population = self.workload.starting_population()
        population.sort(key=lambda item: -item[0])
        opened = [(at, self._open(plan)) for at, plan in population]
        for name, pool in self.pools.items():
            pool.expect([c.conversation_id for _, c in opened if c.pool == name and c.history])
        for at, conversation in opened:
            if conversation.history and conversation.pool is not None:
                window = self.gateway.tiers[conversation.tier].window_tokens
                held = self.gateway.system.tokens + sum(t.tokens for t in conversation.history)
                replica = self.pools[conversation.pool].warm_target(conversation.conversation_id)
                replica.sim.warm_prefix(conversation.conversation_id, min(held, window))
                conversation.prompt_version = self.gateway.prompt_version
            self._push(at, _ARRIVE, conversation)

    def _push(self, at: float, kind: int, subject: object) -> None:
        self._events.push(at, kind, subject)

    def _open(self, plan: ConversationPlan) -> Conversation:
        conversation = Conversation(plan.user_id, plan.user_id, plan.tier, plan.easy, plan.turns)
        conversation.home = self.region
        conversation.pinned = self.neighbours.pinned(plan.user_id)
        # A conversation under way was routed by its earlier messages, as the router goes.
        for _ in plan.earlier_turns:
            score = self.workload.score(conversation.easy, conversation.pool is None)
            conversation.pool = self.gateway.route(conversation, score).conversation_pool
        self.gateway.remember(conversation, plan.earlier_turns)
        return conversation

    def _schedule_conversations(self, until_s: float) -> None:
        while self._scheduled_until < min(until_s, self.duration_s):
            start = self._scheduled_until
            self._scheduled_until = start + 1.0
            for at, plan in self.workload.new_conversations(start, start + 1.0):
                self._push(at, _ARRIVE, self._open(plan))

    def _rung(self) -> int:
        return min(self.ladder.effective_rung, self.config.max_rung)

    def rung(self) -> int:
        """The rung in effect now."""
        return self._rung()

    # --- a message's life ---

    def _arrive(self, now: float, conversation: Any) -> None:
        score = self.workload.score(conversation.easy, conversation.pool is None)
        routed = self.gateway.route(conversation, score)
        if self.neighbours.redirect(self, now, conversation, score, routed.pool):
            return None
        return self._admit(now, conversation, routed)

    def _handed_over(self, now: float, handover: Handover) -> None:
        conversation = handover.conversation
        routed = self.gateway.route(conversation, handover.score)
        if self.lost:  # it was lost on the way: the sender's view of it was a few seconds old
            return self.refuse_unreachable(now, conversation, routed.pool)
        return self._admit(now, conversation, routed)

    def receive(self, at: float, conversation: Conversation, score: float) -> None:
        """A message another region hands over, arriving here at `at` (never in the past of
        this region's loop: fleet/regions.py hands over at the end of a tick at the earliest)."""
        self._push(at, _HANDED_OVER, Handover(conversation, score))

    def _admit(self, now: float, conversation: Conversation, routed: RouteDecision) -> None:
        record = self.recorder
        record.add("arrivals", now, 1)
        rung = self._rung()
        tokens = self.workload.message_tokens()
        plan = self.gateway.plan(conversation, routed, tokens, rung, now)
        if plan is None:
            return self._refused(conversation, routed.pool, now, Outcome.REFUSED_BUDGET)
        history = plan.prompt_tokens - plan.new_tokens if conversation.history else 0
        pool = self.pools[plan.pool]
        replica = pool.choose(
            conversation.conversation_id, plan.prompt_tokens, plan.reusable_tokens
        )
        if replica is None:
            plan, replica = self._fall_back(conversation, plan)
            pool = self.pools[plan.pool]
        if replica is None:
            self.gateway.settle(conversation, plan.reserved, 0.0, now)
            return self._refused(conversation, plan.pool, now, Outcome.NO_REPLICA, history)
        wait = pool.expected_wait_s(replica, conversation.tier is Tier.PLUS)
        if refuse_at_door(conversation.tier, rung, wait, self.config.shedding):
            self.gateway.settle(conversation, plan.reserved, 0.0, now)
            record.add("refused", now, 1)
            return self._refused(conversation, plan.pool, now, Outcome.REFUSED_BUSY, history)
        answer = min(self.workload.answer_tokens(), plan.max_answer_tokens)
        message = _Message(f"m{next(self._ids)}", conversation, plan, now, answer)
        self._live[message.request_id] = message
        self._send(message, replica, now, plan.prompt_tokens, answer, plan.reusable_tokens)
        self.gateway.sent(conversation, plan)
        self._push(now + self.workload.spec.patience_s, _GIVE_UP, message)
        return None

    def _fall_back(self, conversation: Conversation, plan: Plan) -> tuple[Plan, SimReplica | None]:
        """The pool had no replica to pick: the next pools of the fallback chain, as the
        gateway's planner walks it (large falls to small). The conversation stays where the
        router put it."""
        for name in fallback_chain(plan.pool)[1:]:
            pool = self.pools.get(name)
            if pool is None:
                continue
            replica = pool.choose(
                conversation.conversation_id, plan.prompt_tokens, plan.reusable_tokens
            )
            if replica is not None:
                return plan._replace(pool=name), replica
        return plan, None

    def _refused(
        self, conversation: Conversation, pool: str, now: float, outcome: Outcome, history: int = 0
    ) -> None:
        placed = self._placed(conversation)
        self.recorder.message(
            now,
            conversation.tier,
            pool,
            outcome,
            history=history,
            home=conversation.home,
            placed=placed,
        )
        self._next_turn(conversation, now, now)

    def refuse_unreachable(self, now: float, conversation: Conversation, pool: str) -> None:
        """A message no region could take (fleet/regions.py): recorded here, and the user
        tries again after a think time, as after any refusal."""
        self._refused(conversation, pool, now, Outcome.UNREACHABLE)

    def _placed(self, conversation: Conversation) -> int:
        """How the message being recorded reached this region; the conversation's next one
        comes to the region it now runs on."""
        placed = conversation.placed
        conversation.placed = PLACED_HOME if conversation.home == self.region else PLACED_AWAY
        return placed

    def _send(
        self,
        message: _Message,
        replica: SimReplica,
        now: float,
        prompt: int,
        answer: int,
        reusable: int,
    ) -> None:
        message.replica = replica
        self.pools[replica.pool].in_flight[replica.position] += 1
        if not replica.alive:  # dead, and the scheduler does not know yet
            self._waiting_on_dead.setdefault(replica.node_id, []).append(message)
            return
        replica.advance(now, self._on_step)
        paid = self.config.paid_first and message.conversation.tier is Tier.PLUS
        replica.sim.submit(
            message.request_id,
            prompt,
            answer,
            paid=paid,
            conversation=message.conversation.conversation_id,
            reusable_prefix_tokens=reusable,
            shared_prefix=self.gateway.system_prefix,
        )

    def _on_step(self, replica: SimReplica, result: StepResult) -> None:
        end = result.started_s + result.duration_s
        for request_id in result.started:
            message = self._live[request_id]
            if message.moved_at >= 0:  # the answer goes on after its replica died
                self.recorder.moves.append(
                    (message.moved_at, end - message.moved_at, message.generated)
                )
                message.moved_at = -1.0
            elif message.first_token_s < 0:
                message.first_token_s = end
        for finish in result.finished:
            self._answered(self._live.pop(finish.request_id), finish, end)

    def _answered(self, message: _Message, finish: SimFinish, end: float) -> None:
        self._leave(message)
        conversation, plan = message.conversation, message.plan
        tokens = message.generated + finish.output_tokens
        cached = finish.cached_tokens if message.cached < 0 else message.cached
        streaming_s = end - message.first_token_s
        tokens_per_s = (tokens - 1) / streaming_s if tokens > 1 and streaming_s > 0 else math.nan
        history = plan.prompt_tokens - plan.new_tokens if len(conversation.history) else 0
        self.recorder.message(
            message.arrival_s,
            conversation.tier,
            plan.pool,
            Outcome.ANSWERED,
            message.first_token_s - message.arrival_s,
            tokens_per_s,
            plan.prompt_tokens,
            history,
            cached,
            conversation.home,
            self._placed(conversation),
        )
        usage = limiter.cost(plan.prompt_tokens - cached, cached, tokens)
        self.gateway.settle(conversation, plan.reserved, usage, end)
        self.gateway.answered(conversation, plan, tokens)
        self._next_turn(conversation, end, message.arrival_s)

    def _give_up(self, now: float, message: _Message) -> None:
        """The user's patience ran out: if no token has come yet, the app stops the answer."""
        if message.request_id not in self._live or message.first_token_s >= 0:
            return
        replica = message.replica
        if replica is not None and replica.alive:
            replica.advance(now, self._on_step)
            if message.request_id not in self._live or message.first_token_s >= 0:
                return
            stopped = replica.sim.cancel(message.request_id)
            if stopped is not None and message.cached < 0:
                message.cached = stopped.cached_tokens
        del self._live[message.request_id]
        self._leave(message)
        conversation, plan = message.conversation, message.plan
        history = plan.prompt_tokens - plan.new_tokens if conversation.history else 0
        self.recorder.message(
            message.arrival_s,
            conversation.tier,
            plan.pool,
            Outcome.TIMED_OUT,
            prompt=plan.prompt_tokens,
            history=history,
            cached=max(0, message.cached),
            home=conversation.home,
            placed=self._placed(conversation),
        )
        self.recorder.add("timeouts", now, 1)
        self.gateway.settle(conversation, plan.reserved, 0.0, now)
        self._next_turn(conversation, now, message.arrival_s)

    def _leave(self, message: _Message) -> None:
        replica = message.replica
        if replica is not None:
            self.pools[replica.pool].in_flight[replica.position] -= 1

    def _next_turn(self, conversation: Conversation, now: float, sent_s: float) -> None:
        """The user's next message: a think time after the answer would have ended at the
        nominal pace, or a short one after it really ended, whichever is later. The first keeps
        messages/s at the workload's rate while the fleet keeps up; the second holds users back
        when it does not, as a user waits for an answer before replying to it."""
        conversation.turns_left -= 1
        if conversation.turns_left > 0:
            spec = self.workload.spec
            think = self.workload.think_s()
            at = max(sent_s + spec.nominal_stream_s + think, now + spec.think_min_s)
            self._push(at, _ARRIVE, conversation)

    # --- failures ---

    def _kill(self, now: float, _: object) -> None:
        pool = self.pools[self.config.watched_pool]
        replica = next((r for r in pool.replicas if r.alive), None)
        if replica is None:
            return
        replica.advance(now, self._on_step)
        replica.alive = False
        moving = [m for m in self._live.values() if m.replica is replica]
        for message in moving:
            # The gateway knows what it streamed; the cache hit is the dead replica's last word.
            stopped = replica.sim.cancel(message.request_id)
            streamed = stopped.output_tokens if stopped else 0
            message.generated += streamed
            message.moved_at = now if streamed else -1.0
            if stopped is not None and message.cached < 0:
                message.cached = stopped.cached_tokens
        self._waiting_on_dead[replica.node_id] = moving
        self._push(now + self.config.detection_s, _DETECT, replica)

    def _detect(self, now: float, replica: SimReplica) -> None:
        """The scheduler has missed the dead replica's reports: it is never picked again, and
        the gateways move its answers."""
        pool = self.pools[replica.pool]
        replica.load = replace(replica.load, state=NodeState.DEAD)
        pool.index.update(replica.node_id, replica.load)
        for message in self._waiting_on_dead.pop(replica.node_id, []):
            if message.request_id not in self._live:
                continue  # the user gave up meanwhile
            self._leave(message)
            plan = message.plan
            prompt = plan.prompt_tokens + message.generated
            target = pool.choose_move(message.conversation.conversation_id, prompt)
            if target is None:
                continue  # left live: counted as lost at the end
            # What was streamed joins the prompt; the new replica reads it and goes on.
            self._send(
                message,
                target,
                now,
                prompt,
                message.answer_tokens - message.generated,
                plan.prompt_tokens,
            )

    def _flush(self, now: float, _: object) -> None:
        self.gateway.change_system_prompt()

    def _finish_moves(self, until_s: float) -> None:
        """Runs the replicas holding moved answers until those end; one still open is lost."""
        moved = [m for m in self._live.values() if m.generated or m.moved_at >= 0]
        for message in moved:
            if message.replica is not None and message.replica.alive:
                message.replica.advance(until_s, self._on_step)
        for message in moved:
            if message.request_id in self._live:
                del self._live[message.request_id]
                self._lost(message)

    def _lost(self, message: _Message) -> None:
        conversation = message.conversation
        self.recorder.message(
            message.arrival_s,
            conversation.tier,
            message.plan.pool,
            Outcome.LOST,
            home=conversation.home,
            placed=self._placed(conversation),
        )

    def lose(self, now: float) -> None:
        """The whole region is gone at `now` (fleet/regions.py): every replica stops, and the
        answers streaming here are cut, lost with it. Its users' messages go elsewhere once
        the global layer has put it out; until then nothing can take them."""
        self.lost = True
        for pool in self.pools.values():
            for replica in pool.replicas:
                if replica.alive:
                    replica.advance(now, self._on_step)
                    replica.alive = False
                    pool.refresh(replica, NodeState.DEAD)
        for message in list(self._live.values()):
            del self._live[message.request_id]
            self._leave(message)
            self._lost(message)
        self._waiting_on_dead.clear()

    # --- what the scheduler sees ---

    def _report(self, now: float, tick_s: float) -> None:
        record, on_step = self.recorder, self._on_step
        for name, pool in self.pools.items():
            busy_s, prefilled = 0.0, 0
            for replica in pool.replicas:
                if replica.alive:
                    replica.advance(now, on_step)
                    pool.refresh(replica, NodeState.READY)
                busy_s += replica.busy_s
                prefilled += replica.prefilled
            # The share the ladder reads (KV use, or 1 with a queue or seconds of prompts to
            # read), summed over the second's ticks: its mean is what an operator's dashboard
            # shows as the pool's busy share.
            shares = self._pool_busy(pool) * tick_s
            record.add(f"ladder_busy:{name}", now - tick_s, shares)
            last_busy, last_prefilled = self._counted[name]
            self._counted[name] = (busy_s, prefilled)
            gpus = pool.spec.preset.gpus
            record.add(f"busy:{name}", now - tick_s, (busy_s - last_busy) * gpus)
            record.add(
                f"prefill:{name}",
                now - tick_s,
                (prefilled - last_prefilled) * pool.prefill_gpu_s_per_token,
            )
        record.put("rung", now - tick_s, self._rung())

    def pool_busy(self, name: str) -> float:
        """The pool's busy share as the ladder reads it (domain.ladder.busy_share)."""
        return self._pool_busy(self.pools[name])

    def _pool_busy(self, pool: Pool) -> float:
        # Saturated: prompts waiting longer than the rung-3 wait to be read, as the scheduler.
        saturated = pool.prefill_tokens_per_s * self.config.shedding.max_wait_s
        return busy_share([r.load for r in pool.replicas], saturated)

    def _tick_ladder(self, now: float) -> None:
        if self.config.watched_pool not in self.pools:
            return
        pool_busy = {name: self._pool_busy(pool) for name, pool in self.pools.items()}
        busy = ladder_busy(pool_busy, self.ladder.rung, self.config.watched_pool, SMALL_POOL)
        self.ladder = tick(self.ladder, busy, now, self.config.ladder)
