"""The global layer's view of the regions, as the simulated regions see each other: each
region publishes its capacity (the ladder's rung, each pool's busy share and whether it has a
ready replica) every few seconds, and what the others read is the latest publication that has
reached them, a publish delay after it was taken. A region whose latest publication is older
than `out_after_s` is out: it stopped publishing (it was lost), and nothing is sent to it.

The real platform keeps the same figures in its global store and refreshes them every few
seconds; the delay is what makes a spill decision stale, so the simulation keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Published:
    region: int
    taken_s: float  # when the region measured it
    visible_s: float  # when the other regions can read it
    rung: int
    busy: dict[str, float]  # per pool, domain.ladder.busy_share
    ready: dict[str, bool]  # per pool: any replica the scheduler has READY


@dataclass(frozen=True, slots=True)
class DirectoryPolicy:
    publish_interval_s: float = 3.0
    publish_delay_s: float = 1.0  # a write to the global store and its watchers hearing of it
    # Three publications missed: out within 10 s of the last one taken (the bound).
    out_after_s: float = 9.0

    def __post_init__(self) -> None:
        if not 0 < self.publish_interval_s < self.out_after_s:
            raise ValueError("a region must publish more often than it is put out")
        if not 0 <= self.publish_delay_s < self.out_after_s:
            raise ValueError("a publication must arrive before its region is put out")


class Directory:
    def __init__(self, regions: int, policy: DirectoryPolicy) -> None:
        self.policy = policy
        # Per region, its publications oldest first; only those still to become visible and
        # the latest visible one are kept.
        self._published: list[list[Published]] = [[] for _ in range(regions)]

    def publish(self, published: Published) -> None:
        self._published[published.region].append(published)

    def latest(self, region: int, now: float) -> Published | None:
        """The newest publication of `region` visible at `now`; None before its first."""
        kept = self._published[region]
        visible = [p for p in kept if p.visible_s <= now]
        if not visible:
            return None
        if len(visible) > 1:  # the older visible ones are read no more
            del kept[: len(visible) - 1]
        return visible[-1]

    def is_out(self, region: int, now: float) -> bool:
        """Whether the region stopped publishing: its latest publication is too old."""
        latest = self.latest(region, now)
        return latest is None or now - latest.taken_s > self.policy.out_after_s
