"""A region's capacity, as its scheduler publishes it to the global directory every few
seconds: per pool, the ladder's rung, the busy share and the ready replicas. Every scheduler
of the region holds the whole table and the same ladder, so each may publish: the record is
the same whoever writes it last. A region that stops publishing ages out (domain/regions.py)."""

from __future__ import annotations

from collections.abc import Iterable

from domain.ladder import busy_share
from domain.regions import PoolCapacity
from domain.types import NodeState
from infra.directory import Directory
from scheduler.ladder import LadderKeeper
from scheduler.table import LoadTable


def region_capacity(
    table: LoadTable, ladder: LadderKeeper, pools: Iterable[str], saturated_queue_tokens: float
) -> dict[str, PoolCapacity]:
    capacity = {}
    for pool in pools:
        replicas = table.pool(pool)
        ready = sum(1 for replica in replicas if replica.state is NodeState.READY)
        capacity[pool] = PoolCapacity(
            ladder.state.effective_rung, busy_share(replicas, saturated_queue_tokens), ready
        )
    return capacity


class RegionPublisher:
    def __init__(
        self,
        region: str,
        directory: Directory,
        table: LoadTable,
        ladder: LadderKeeper,
        pools: Iterable[str],
        saturated_queue_tokens: float,
    ) -> None:
        self._region = region
        self._directory = directory
        self._table = table
        self._ladder = ladder
        self._pools = tuple(pools)
        self._saturated = saturated_queue_tokens

    async def publish(self) -> None:
        capacity = region_capacity(self._table, self._ladder, self._pools, self._saturated)
        await self._directory.publish_capacity(self._region, capacity)
