"""Keeps the shedding ladder: one scheduler moves it, every scheduler serves the same rung.

The rung lives in a shared store (etcd in production) as one JSON document written only by
compare-and-swap. One scheduler, elected through an etcd lease, ticks it every 10 s from the
large pool's busy share (and, once Free is shed to it, the small pool's: domain.ladder.ladder_busy);
the others read it every second. Election rather than "everyone
computes the same": schedulers see the reports at slightly different moments and tick at
different phases, so independent computations would disagree exactly at the lines that matter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Protocol

import aetcd
import grpc
import structlog

from domain.ladder import (
    LadderChange,
    LadderPolicy,
    LadderState,
    busy_share,
    ladder_busy,
    pin,
    tick,
)
from domain.pools import SMALL_POOL
from scheduler.table import LoadTable

ETCD_ERRORS = (aetcd.ClientError, grpc.aio.AioRpcError, TimeoutError)
PIN_ATTEMPTS = 5


def state_to_json(state: LadderState) -> bytes:
    return json.dumps(asdict(state)).encode()


def state_from_json(data: bytes) -> LadderState:
    raw = json.loads(data)
    history = tuple(LadderChange(**change) for change in raw.get("history", ()))
    return LadderState(raw["rung"], raw.get("pinned"), raw.get("busy_share", 0.0), history)


class LadderStore(Protocol):
    async def read(self) -> tuple[LadderState, int]:
        """The state and its version (0: never written)."""
        ...

    async def write(self, state: LadderState, version: int) -> bool:
        """Writes only if nobody wrote since `version`; False otherwise."""
        ...

    async def is_leader(self) -> bool: ...

    async def close(self) -> None: ...


class InProcessLadderStore:
    """The local platform's store: one scheduler, always the leader."""

    def __init__(self) -> None:
        self._state = LadderState()
        self._version = 0

    async def read(self) -> tuple[LadderState, int]:
        return self._state, self._version

    async def write(self, state: LadderState, version: int) -> bool:
        if version != self._version:
            return False
        self._state, self._version = state, self._version + 1
        return True

    async def is_leader(self) -> bool:
        return True

    async def close(self) -> None:
        return None


class EtcdLadderStore:
    def __init__(
        self,
        client: aetcd.Client,
        scheduler_id: str,
        prefix: str = "/chat/v1/ladder/",
        leader_ttl_s: float = 5.0,
    ) -> None:
        self._etcd = client
        self._me = scheduler_id.encode()
        self._state_key = (prefix + "state").encode()
        self._leader_key = (prefix + "leader").encode()
        self._ttl = max(1, math.ceil(leader_ttl_s))
        self._lease: aetcd.Lease | None = None

    async def read(self) -> tuple[LadderState, int]:
        found = await self._etcd.get(self._state_key)
        if found is None:
            return LadderState(), 0
        return state_from_json(found.value), found.mod_revision

    async def write(self, state: LadderState, version: int) -> bool:
        tx = self._etcd.transactions
        succeeded, _ = await self._etcd.transaction(
            compare=[tx.mod(self._state_key) == version],
            success=[tx.put(self._state_key, state_to_json(state))],
            failure=[],
        )
        return bool(succeeded)

    async def is_leader(self) -> bool:
        """Holds the leader key, or takes it when free; a lease lost in an outage is replaced."""
        if self._lease is not None:
            reply = await self._lease.refresh()
            if reply is None or reply.TTL <= 0:
                self._lease = None
        if self._lease is None:
            self._lease = await self._etcd.lease(self._ttl)
        holder = await self._etcd.get(self._leader_key)
        if holder is None:
            tx = self._etcd.transactions
            await self._etcd.transaction(
                compare=[tx.create(self._leader_key) == 0],
                success=[tx.put(self._leader_key, self._me, lease=self._lease)],
                failure=[],
            )
            holder = await self._etcd.get(self._leader_key)
        return holder is not None and holder.value == self._me

    async def close(self) -> None:
        if self._lease is not None:
            # Hand the lead over at once instead of after the lease runs out.
            with contextlib.suppress(*ETCD_ERRORS):
                await self._lease.revoke()
        await self._etcd.close()


class LadderKeeper:
    """Owns this scheduler's view of the ladder; ticks it while this scheduler leads."""

    def __init__(
        self,
        store: LadderStore,
        table: LoadTable,
        pool: str,
        policy: LadderPolicy,
        clock: Callable[[], float],
        tick_s: float = 10.0,
        read_s: float = 1.0,
        shed_to_pool: str = SMALL_POOL,
        saturated_queue_tokens: float = math.inf,
    ) -> None:
        self._store = store
        self._table = table
        self._pool = pool
        self._shed_to_pool = shed_to_pool
        self._saturated_queue_tokens = saturated_queue_tokens
        self._policy = policy
        self._clock = clock
        self._tick_s = tick_s
        self._read_s = read_s
        self.state = LadderState()
        self.leading = False
        self._log = structlog.get_logger(component="ladder")

    def busy_share(self) -> float:
        pools = {self._pool, self._shed_to_pool}
        busy = {
            name: busy_share(self._table.pool(name), self._saturated_queue_tokens) for name in pools
        }
        # A shed-to pool with no node at all is not a pool to shed to: it is left out.
        if not self._table.pool(self._shed_to_pool):
            busy.pop(self._shed_to_pool, None)
        return ladder_busy(busy, self.state.rung, self._pool, self._shed_to_pool)

    async def run(self) -> None:
        next_tick = self._clock() + self._tick_s
        while True:
            await asyncio.sleep(self._read_s)
            try:
                self.state, version = await self._store.read()
                self.leading = await self._store.is_leader()
                if self.leading and self._clock() >= next_tick:
                    next_tick = self._clock() + self._tick_s
                    await self._tick(version)
            except ETCD_ERRORS as error:
                # Picks go on with the last known rung; nothing moves until etcd is back. And
                # this scheduler no longer leads: its lease lapses at etcd within the TTL and
                # another takes the lead; two must never say they lead.
                self.leading = False
                self._log.warning("ladder store unreachable", error=type(error).__name__)

    async def _tick(self, version: int) -> None:
        moved = tick(self.state, self.busy_share(), self._clock(), self._policy)
        if await self._store.write(moved, version):
            if moved.rung != self.state.rung:
                self._log.warning("ladder moved", rung=moved.rung, reason=moved.history[-1].reason)
            self.state = moved

    async def close(self) -> None:
        await self._store.close()

    async def pin(self, rung: int | None) -> LadderState:
        """Pins (or unpins, with None) from any scheduler; retried if a tick raced it."""
        for _ in range(PIN_ATTEMPTS):
            current, version = await self._store.read()
            pinned = pin(current, rung, self.busy_share(), self._clock())
            if await self._store.write(pinned, version):
                self.state = pinned
                return pinned
        raise TimeoutError("the ladder kept changing under the pin; try again")
