"""Keeps the model versions and their rollout where the ladder is kept: in process on one
machine, one etcd document written by compare-and-swap when schedulers share etcd. Every
scheduler reads it from the store on each GetRollout, so a change made at one reaches every
gateway (which asks about every half second) within a second."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Callable
from dataclasses import asdict
from typing import Protocol

import aetcd

from domain.rollout import GateRecord, RolloutChange, RolloutState, Version

CHANGE_ATTEMPTS = 5


def state_to_json(state: RolloutState) -> bytes:
    return json.dumps(asdict(state)).encode()


def state_from_json(data: bytes) -> RolloutState:
    raw = json.loads(data)
    return RolloutState(
        versions=tuple(Version(**v) for v in raw["versions"]),
        current=raw["current"],
        candidate=raw["candidate"],
        percent=tuple((tier, share) for tier, share in raw["percent"]),
        salt=raw["salt"],
        holdout_version=raw["holdout_version"],
        holdout_salt=raw["holdout_salt"],
        holdout_percent=raw["holdout_percent"],
        pins=tuple((user, version) for user, version in raw.get("pins", ())),
        history=tuple(RolloutChange(**c) for c in raw.get("history", ())),
        gates=tuple(GateRecord(**g) for g in raw.get("gates", ())),
    )


class RolloutStore(Protocol):
    async def read(self) -> tuple[RolloutState, int]:
        """The state and its revision (0: never written, the default state)."""
        ...

    async def write(self, state: RolloutState, revision: int) -> bool:
        """Writes only if nobody wrote since `revision`; False otherwise."""
        ...

    async def close(self) -> None: ...


class InProcessRolloutStore:
    def __init__(self) -> None:
        self._state = RolloutState()
        self._revision = 0

    async def read(self) -> tuple[RolloutState, int]:
        return self._state, self._revision

    async def write(self, state: RolloutState, revision: int) -> bool:
        if revision != self._revision:
            return False
        self._state, self._revision = state, self._revision + 1
        return True

    async def close(self) -> None:
        return None


class EtcdRolloutStore:
    def __init__(self, client: aetcd.Client, key: str = "/chat/v1/rollout/state") -> None:
        self._etcd = client
        self._key = key.encode()

    async def read(self) -> tuple[RolloutState, int]:
        found = await self._etcd.get(self._key)
        if found is None:
            return RolloutState(), 0
        return state_from_json(found.value), found.mod_revision

    async def write(self, state: RolloutState, revision: int) -> bool:
        tx = self._etcd.transactions
        succeeded, _ = await self._etcd.transaction(
            compare=[tx.mod(self._key) == revision],
            success=[tx.put(self._key, state_to_json(state))],
            failure=[],
        )
        return bool(succeeded)

    async def close(self) -> None:
        await self._etcd.close()


class RolloutKeeper:
    def __init__(
        self,
        store: RolloutStore,
        clock: Callable[[], float],
        recheck_s: float = math.inf,
    ) -> None:
        self._store = store
        self._clock = clock
        # How often a held read looks at the store again: a change made through another
        # scheduler (etcd) wakes nothing here. inf: only this process writes (in process).
        self._recheck_s = recheck_s
        # Set, and replaced, by each change made through this keeper.
        self._changed = asyncio.Event()
        # Held reads end at once from the start of a stop: a gateway asks the next scheduler.
        self._stopping = False

    async def read(self) -> tuple[RolloutState, int]:
        return await self._store.read()

    async def read_after(self, revision: int, wait_s: float) -> tuple[RolloutState, int]:
        """The state once its revision is no longer `revision`, or after wait_s the one there
        is: a change through this keeper answers at once, one through another scheduler
        within recheck_s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            changed = self._changed
            state, current = await self._store.read()
            left = deadline - loop.time()
            if current != revision or left <= 0 or self._stopping:
                return state, current
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, self._recheck_s))

    async def release(self) -> None:
        """Answers every held read now, and every later one at once: the scheduler stops."""
        self._stopping = True
        self._changed.set()

    async def change(self, edit: Callable[[RolloutState, float], RolloutState]) -> RolloutState:
        """Applies one change by compare-and-swap, again if another scheduler wrote between."""
        for _ in range(CHANGE_ATTEMPTS):
            current, revision = await self._store.read()
            changed = edit(current, self._clock())
            if await self._store.write(changed, revision):
                self._changed.set()
                self._changed = asyncio.Event()
                return changed
        raise TimeoutError("the rollout kept changing under this change; try again")

    async def close(self) -> None:
        await self._store.close()
