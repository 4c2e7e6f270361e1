"""Which region serves a message: the user's home unless home is full and another has room;
a conversation stays where it runs until that region is full or gone; a pinned user never
leaves home. Pure: the gateway feeds it the global directory's view (gateway/regions.py)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

# A region whose capacity record is older than this has stopped publishing: it is out. Records
# are written every 2 s, so three missed in a row, well inside the 10 s the design allows.
DEFAULT_OUT_AFTER_S = 6.0
# Home is full at this rung: rung 3 is where the ladder starts refusing Free at the door.
DEFAULT_SPILL_RUNG = 3


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    rung: int
    busy_share: float
    ready_replicas: int


@dataclass(frozen=True, slots=True)
class RegionCapacity:
    """One region as it last published itself."""

    name: str
    published_at: float
    pools: dict[str, PoolCapacity] = field(default_factory=dict)
    gateways: tuple[str, ...] = ()

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.published_at)


@dataclass(frozen=True, slots=True)
class RegionRules:
    spill_rung: int = DEFAULT_SPILL_RUNG
    out_after_s: float = DEFAULT_OUT_AFTER_S


class Reason(enum.StrEnum):
    HOME = "home"  # at home, home has room (or the user is pinned)
    STAYS = "stays"  # a later turn, on the region the conversation runs in
    SPILL = "spill"  # home full: a region with room
    HOME_OUT = "home_out"  # home has stopped publishing: anywhere with room, without history


@dataclass(frozen=True, slots=True)
class Placement:
    region: str
    reason: Reason


class Regions:
    """The regions' capacity at one moment, and the rules that read it."""

    def __init__(self, capacity: dict[str, RegionCapacity], now: float, rules: RegionRules):
        self._capacity = capacity
        self._now = now
        self._rules = rules

    def alive(self, name: str) -> bool:
        record = self._capacity.get(name)
        return record is not None and record.age_s(self._now) <= self._rules.out_after_s

    def full(self, name: str, pool: str) -> bool:
        """At or above the spill rung, or no ready replica in the pool (a region that does
        not publish the pool at all has none)."""
        record = self._capacity.get(name)
        if record is None:
            return True
        capacity = record.pools.get(pool)
        return (
            capacity is None
            or capacity.ready_replicas == 0
            or capacity.rung >= self._rules.spill_rung
        )

    def with_room(self, pool: str, exclude: str) -> str | None:
        """The alive region with the most room in the pool: lowest rung, then busy share,
        then name (so every gateway chooses the same one from the same view)."""
        candidates = [
            (record.pools[pool].rung, record.pools[pool].busy_share, name)
            for name, record in self._capacity.items()
            if name != exclude and self.alive(name) and not self.full(name, pool)
        ]
        return min(candidates)[2] if candidates else None

    def place(self, home: str, pinned: bool, current: str, pool: str) -> Placement:
        """Where a message of a conversation goes. current: the region the conversation runs
        in ('' for a new one, or one that always ran at home)."""
        if pinned:
            return Placement(home, Reason.HOME)
        if current and current != home and self.alive(current) and not self.full(current, pool):
            return Placement(current, Reason.STAYS)
        if not self.alive(home):
            elsewhere = self.with_room(pool, exclude=home)
            return Placement(elsewhere or home, Reason.HOME_OUT if elsewhere else Reason.HOME)
        if self.full(home, pool):
            elsewhere = self.with_room(pool, exclude=home)
            if elsewhere is not None:
                return Placement(elsewhere, Reason.SPILL)
        return Placement(home, Reason.HOME)
