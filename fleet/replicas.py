"""The simulated fleet: replicas of domain.replica_sim, grouped in pools, and the three ways
of choosing one (the platform's affinity picker, round-robin, least-loaded).

A replica advances in virtual time only when the fleet needs it to: up to the time of an event
that concerns it (a message for it, a timeout, a load report). Between events it takes its
quiet decode stretches in one `fast_forward` call and steps one by one only when something
starts, finishes or is admitted. Pure: no I/O.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from domain.picker import NEVER_ESCAPE, EscapeRule, ReplicaLoad
from domain.pool_index import PoolIndex
from domain.replica_hardware import ReplicaPreset, step_seconds
from domain.replica_requests import StepResult
from domain.replica_sim import ReplicaSim
from domain.start_wait import StartWaitModel
from domain.types import NodeState


class Strategy(enum.StrEnum):
    AFFINITY = "affinity"  # the platform's picker: rendezvous favourite, escape when it pays
    ROUND_ROBIN = "round-robin"
    LEAST_LOADED = "least-loaded"  # fewest answers in flight, as the router itself counts them
    # The picker's favourite always, never escaping: the ceiling for pure conversation affinity.
    FAVOURITE = "favourite"


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    preset: ReplicaPreset
    replicas: int


def prefill_gpu_s_per_token(preset: ReplicaPreset) -> float:
    """GPU-seconds one prompt token costs to read: its FLOPs at the preset's efficiency, the
    way sizing 000 counts prefill GPUs ("reading 3,000 tokens takes 1.05 GPU-seconds")."""
    return 2.0 * preset.params / (preset.peak_flops * preset.flops_efficiency)


def prefill_tokens_per_s(preset: ReplicaPreset) -> float:
    """How fast one replica reads prompts when it does nothing else: full-budget steps. The
    scheduler divides a replica's queued prefill by this to tell a gateway the expected wait."""
    return preset.step_tokens / step_seconds(preset, preset.step_tokens, 0)


OnStep = Callable[["SimReplica", StepResult], None]


class SimReplica:
    """One replica: the simulator, its identity in the load table, and what it has done."""

    __slots__ = ("alive", "busy_s", "load", "node_id", "pool", "position", "prefilled", "sim")

    def __init__(self, node_id: str, pool: str, position: int, preset: ReplicaPreset) -> None:
        self.node_id = node_id
        self.pool = pool
        self.position = position  # its row in the pool
        self.sim = ReplicaSim(preset, name_decoders=False)
        self.alive = True
        self.busy_s = 0.0  # seconds spent stepping
        self.prefilled = 0  # prompt tokens read
        self.load = self.report(NodeState.READY)  # what the scheduler last heard

    def advance(self, until_s: float, on_step: OnStep) -> None:
        """Runs the replica up to `until_s` (to the end of the step under way then). Steps in
        which something starts or finishes go to `on_step`."""
        sim = self.sim
        while sim.now_s < until_s:
            before = sim.now_s
            if sim.fast_forward(until_s):
                self.busy_s += sim.now_s - before
                continue
            if sim.now_s >= until_s:
                return  # it was idle: its clock moved on
            result = sim.step()
            self.busy_s += result.duration_s
            for _, tokens in result.prefilled:
                self.prefilled += tokens
            if result.started or result.finished:
                on_step(self, result)

    def report(self, state: NodeState) -> ReplicaLoad:
        """The load report its node agent would send now."""
        load = self.sim.load()
        return ReplicaLoad(
            node_id=self.node_id,
            address=self.node_id,
            pool=self.pool,
            model=self.sim.preset.model,
            state=state,
            free_kv_tokens=load.free_kv_tokens,
            queued_prefill_tokens=load.queued_prefill_tokens,
            running_requests=load.running_requests,
            waiting_requests=load.waiting_requests,
            kv_usage=load.kv_usage,
            prefix_hit_rate=load.prefix_hit_rate,
            max_running_requests=self.sim.preset.max_running,
        )


class Pool:
    """One model's replicas, the scheduler's view of them (a PoolIndex fed by their reports),
    and the picking strategy under test."""

    def __init__(self, spec: PoolSpec, strategy: Strategy, wait: StartWaitModel) -> None:
        self.spec = spec
        self.strategy = strategy
        self.replicas = [
            SimReplica(f"{spec.name}-{i:04d}", spec.name, i, spec.preset)
            for i in range(spec.replicas)
        ]
        # Every conversation under way in the region (about half a million) keeps its
        # favourite: the picks of a whole day, not a scheduler's bounded memory.
        self.index = PoolIndex(
            (r.load for r in self.replicas), EscapeRule(wait), remembered_favourites=1 << 21
        )
        self.by_node = {r.node_id: r for r in self.replicas}
        self.prefill_tokens_per_s = prefill_tokens_per_s(spec.preset)
        self.prefill_gpu_s_per_token = prefill_gpu_s_per_token(spec.preset)
        self.gpus = spec.preset.gpus * spec.replicas
        # The router's own count of answers in flight per replica (least-loaded's signal).
        self.in_flight = np.zeros(spec.replicas, dtype=np.int64)
        self._turn = itertools.cycle(range(spec.replicas))

    def refresh(self, replica: SimReplica, state: NodeState) -> None:
        """A load report reaches the scheduler."""
        replica.load = replica.report(state)
        self.index.update(replica.node_id, replica.load)

    def choose(
        self, conversation_id: str, prompt_tokens: int, reusable_tokens: int
    ) -> SimReplica | None:
        if self.strategy is Strategy.AFFINITY:
            pick = self.index.pick(conversation_id, prompt_tokens, reusable_tokens, charge=True)
            return None if pick.replica is None else self.by_node[pick.replica.node_id]
        if self.strategy is Strategy.FAVOURITE:
            # No queue is ever worth more than the cache: the same picker, escape never taken.
            pick = self.index.pick(conversation_id, 0, 0, charge=True, rule=NEVER_ESCAPE)
            return None if pick.replica is None else self.by_node[pick.replica.node_id]
        if self.strategy is Strategy.ROUND_ROBIN:
            for _ in range(len(self.replicas)):
                replica = self.replicas[next(self._turn)]
                if replica.load.pickable:
                    return replica
            return None
        return self._least_loaded()

    def choose_move(self, conversation_id: str, prompt_tokens: int) -> SimReplica | None:
        """Where an answer off a dead replica goes: the scheduler's rule for moves under the
        picker's strategies (PoolIndex.pick_move), the strategy's own choice otherwise."""
        if self.strategy in (Strategy.AFFINITY, Strategy.FAVOURITE):
            pick = self.index.pick_move(prompt_tokens)
            return None if pick.replica is None else self.by_node[pick.replica.node_id]
        return self.choose(conversation_id, prompt_tokens, 0)

    def warm_target(self, conversation_id: str) -> SimReplica:
        """Where a conversation's last turn ran before the simulation began: its favourite under
        affinity, anywhere (in turn) under the strategies that do not keep conversations."""
        if self.strategy in (Strategy.AFFINITY, Strategy.FAVOURITE):
            favourite = self.index.favourite(conversation_id)
            if favourite is not None:
                return self.by_node[favourite.node_id]
        return self.replicas[next(self._turn)]

    def expect(self, conversation_ids: list[str]) -> None:
        """Many conversations are about to be placed (the start of a simulation): their
        favourites are scored in blocks instead of one pick at a time."""
        if self.strategy in (Strategy.AFFINITY, Strategy.FAVOURITE):
            self.index.remember_favourites(conversation_ids)

    def _least_loaded(self) -> SimReplica | None:
        pickable = self.index.columns["pickable"]
        if not pickable.any():
            return None
        counts = np.where(pickable, self.in_flight, np.iinfo(np.int64).max)
        return self.replicas[int(counts.argmin())]

    def ready(self) -> bool:
        """Whether any replica of the pool can be picked (the scheduler has it READY)."""
        return bool(self.index.columns["pickable"].any())

    def expected_wait_s(self, replica: SimReplica, paid: bool) -> float:
        """What PickReplica tells the gateway (scheduler/servicer.py)."""
        return self.index.start_wait_s(replica.node_id, paid)
