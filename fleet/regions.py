"""Several regions in step: each a whole simulated region (fleet.region.FleetSim) with its own
users, and between them the router that sends each new conversation home or, when home is
full, to a region with room (docs/decisions.md, "Regions").

- Every user has a home region (the nearest: each region's workload is its own users) and
  sends there. A share of users is pinned there by data residency (drawn from the user's id,
  so a run is the same whatever order things happen in).
- A new conversation goes home unless home is full (its ladder at or above `full_rung`, or no
  ready replica in the pool the router chose) and another region has room; then it runs
  there, and its later messages stay there: its cache is there now. A pinned user never
  leaves home: at home's rung 3 they get what the ladder gives them.
- "Room" is read from the other regions' published capacity (fleet.directory), a few seconds
  old: a rung below `full_rung`, a ready replica in the pool, and a busy share below
  `room_busy`. Among regions with room one is drawn with odds by its headroom, so that the
  spills of one publication period do not all land on the same region.
- A conversation under way stays where it runs. Only when that region is lost (or, with
  `move_when_full`, full) does it move: home when home has room, else a region with room; it
  reads its whole prompt again there, once (its cache stayed behind). The simulator carries
  the history along: the case where history is replicated, the costlier one for the regions
  that take the moved conversations in.
- A lost region's answers in flight are cut (lost with it). Until the global layer puts it out
  (it stopped publishing: fleet.directory), its users' messages reach nothing; after that they
  go home, when home is another region, or anywhere with room (the least busy alive region
  when none has room). Its pinned users get nothing until it returns.
- A message handed over arrives after a cross-region hop (`hop_s`), and no earlier than the end
  of the tick it was handed over in: the regions run a tick each in turn, so none ever
  receives an event in its past.

What is left out: a lost region's return (its users would go home again for new
conversations), and history being unavailable while home is lost (the simulation pays the
larger prefill of carrying it).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

from fleet.directory import Directory, DirectoryPolicy, Published
from fleet.recorder import PLACED_MOVED, PLACED_SPILLED, Recorder
from fleet.region import FleetConfig, FleetSim, Neighbours, cyclic_gc_paused
from fleet.sim_gateway import Conversation
from fleet.workload import Workload, WorkloadSpec

_PINNED_BUCKETS = 10_000


@dataclass(frozen=True, slots=True)
class SpillPolicy:
    full_rung: int = 1  # home is full from this rung on: the ladder has started to shed
    room_busy: float = 0.85  # below this busy share a pool has room (the ladder's first line)
    pinned_share: float = 0.1  # users whose data residency pins them to their home region
    hop_s: float = 0.1  # a message handed to another region
    move_when_full: bool = False  # conversations under way leave a full region too

    def __post_init__(self) -> None:
        if not 0 <= self.pinned_share <= 1:
            raise ValueError(f"pinned_share is a share, not {self.pinned_share}")
        if not 1 <= self.full_rung <= 3:
            raise ValueError(f"full_rung is a rung of the ladder (1-3), not {self.full_rung}")


@dataclass(frozen=True, slots=True)
class RegionSpec:
    name: str
    config: FleetConfig
    workload: WorkloadSpec  # its own users: those nearest to it


@dataclass(frozen=True, slots=True)
class RegionsConfig:
    regions: tuple[RegionSpec, ...]
    spill: SpillPolicy = field(default_factory=SpillPolicy)
    directory: DirectoryPolicy = field(default_factory=DirectoryPolicy)
    lose: int = 0  # the region lost at lose_at_s
    lose_at_s: float = -1.0  # negative: none is lost


class Spill(Neighbours):
    """The router between regions, as each region's gateways apply it (the module notes)."""

    def __init__(self, policy: SpillPolicy, directory: Directory, seed: int) -> None:
        self.policy = policy
        self.directory = directory
        self.regions: list[FleetSim] = []
        self.tick_end_s = 0.0  # the end of the tick the regions are running
        self.out_at_s: dict[int, float] = {}  # when a lost region was first seen out
        self._rng = random.Random(seed)

    def pinned(self, user_id: str) -> bool:
        bucket = zlib.crc32(user_id.encode()) % _PINNED_BUCKETS
        return bucket < round(self.policy.pinned_share * _PINNED_BUCKETS)

    def redirect(
        self, region: FleetSim, now: float, conversation: Conversation, score: float, pool: str
    ) -> bool:
        if region.lost:
            return self._from_lost(region, now, conversation, score, pool)
        if conversation.pinned or not self._full(region, pool):
            return False
        under_way = conversation.pool is not None or len(conversation.history) > 0
        if under_way and not self.policy.move_when_full:
            return False
        target = self._destination(now, conversation, pool, region.region)
        if target < 0:
            return False
        self._hand_over(target, now, conversation, score)
        return True

    def _from_lost(
        self, region: FleetSim, now: float, conversation: Conversation, score: float, pool: str
    ) -> bool:
        here = region.region
        if conversation.pinned or not self._seen_out(here, now):
            region.refuse_unreachable(now, conversation, pool)
            return True
        target = self._destination(now, conversation, pool, here)
        if target < 0:
            target = self._least_busy(now, pool, here)
        if target < 0:
            region.refuse_unreachable(now, conversation, pool)
        else:
            self._hand_over(target, now, conversation, score)
        return True

    def _seen_out(self, region: int, now: float) -> bool:
        if region in self.out_at_s:
            return True
        if self.directory.is_out(region, now):
            self.out_at_s[region] = now
            return True
        return False

    def _full(self, region: FleetSim, pool: str) -> bool:
        return region.rung() >= self.policy.full_rung or not region.pools[pool].ready()

    def _destination(self, now: float, conversation: Conversation, pool: str, here: int) -> int:
        """Home when home is elsewhere and has room, else a region with room; -1 for none."""
        home = conversation.home
        if home != here and self._room(self._alive(home, now), pool) > 0:
            return home
        candidates: list[tuple[int, float]] = []
        for region in range(len(self.regions)):
            if region != here:
                room = self._room(self._alive(region, now), pool)
                if room > 0:
                    candidates.append((region, room))
        if not candidates:
            return -1
        draw = self._rng.random() * sum(room for _, room in candidates)
        for region, room in candidates:
            draw -= room
            if draw < 0:
                return region
        return candidates[-1][0]

    def _alive(self, region: int, now: float) -> Published | None:
        if self.directory.is_out(region, now):
            return None
        return self.directory.latest(region, now)

    def _room(self, published: Published | None, pool: str) -> float:
        """The pool's headroom below room_busy as last published; 0 for none."""
        if published is None or published.rung >= self.policy.full_rung:
            return 0.0
        if not published.ready.get(pool, False):
            return 0.0
        return max(0.0, self.policy.room_busy - published.busy.get(pool, 1.0))

    def _least_busy(self, now: float, pool: str, here: int) -> int:
        best, best_busy = -1, 2.0
        for region in range(len(self.regions)):
            published = self._alive(region, now) if region != here else None
            if published is not None and published.ready.get(pool, False):
                busy = published.busy.get(pool, 1.0)
                if busy < best_busy:
                    best, best_busy = region, busy
        return best

    def _hand_over(self, target: int, now: float, conversation: Conversation, score: float) -> None:
        conversation.placed = PLACED_MOVED if conversation.history else PLACED_SPILLED
        at = max(now + self.policy.hop_s, self.tick_end_s)
        self.regions[target].receive(at, conversation, score)


class RegionsSim:
    """The regions of a RegionsConfig run in step, a tick each in turn, publishing their
    capacity to the directory every publish interval."""

    def __init__(self, config: RegionsConfig, seed: int, scale: float, duration_s: float) -> None:
        ticks = {spec.config.report_interval_s for spec in config.regions}
        if len(ticks) != 1:
            raise ValueError("the regions must report on one tick to run in step")
        self.config = config
        self.tick_s = ticks.pop()
        self.directory = Directory(len(config.regions), config.directory)
        self.spill = Spill(config.spill, self.directory, seed)
        self.regions = [
            FleetSim(
                spec.config,
                Workload(spec.workload, seed * 1000 + i, scale, f"r{i}u"),
                duration_s,
                i,
                self.spill,
            )
            for i, spec in enumerate(config.regions)
        ]
        self.spill.regions = self.regions
        self.duration_s = duration_s
        self.lost_at_s = -1.0
        self._prepared = False

    def prepare(self) -> None:
        if self._prepared:
            return
        self._prepared = True
        for region in self.regions:
            region.prepare()
        self._publish(0.0, 0.0)

    def run(self) -> list[Recorder]:
        self.prepare()
        every = max(1, round(self.config.directory.publish_interval_s / self.tick_s))
        delay = self.config.directory.publish_delay_s
        with cyclic_gc_paused():
            for k in range(1, self.regions[0].ticks() + 1):
                self._maybe_lose((k - 1) * self.tick_s)
                self.spill.tick_end_s = k * self.tick_s
                for region in self.regions:
                    region.run_tick(k)
                if k % every == 0:
                    self._publish(k * self.tick_s, delay)
            for region in self.regions:
                region.finish()
        return [region.recorder for region in self.regions]

    def _maybe_lose(self, now: float) -> None:
        at = self.config.lose_at_s
        if 0 <= at <= now and self.lost_at_s < 0:
            self.lost_at_s = now
            self.regions[self.config.lose].lose(now)

    def _publish(self, now: float, delay: float) -> None:
        for region in self.regions:
            if region.lost:
                continue  # it stopped publishing: the directory puts it out
            names = list(region.pools)
            self.directory.publish(
                Published(
                    region.region,
                    now,
                    now + delay,
                    region.rung(),
                    {name: region.pool_busy(name) for name in names},
                    {name: region.pools[name].ready() for name in names},
                )
            )
