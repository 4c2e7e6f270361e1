"""Which region serves a message, seen from one gateway (the rules: domain/regions.py).

A gateway reached by a user from another region passes the message to a gateway of the
user's home region (one hop), which decides: at home, on the region the conversation runs in,
or, home being full, on the region with the most room. A message passed on to run away from
home carries its home region's name (`x-chat-serve-for`), and the gateway there runs it on a
pipeline whose store is the home region's (gateway/home_client.py). When home is out, the
user's messages are refused (UNAVAILABLE, with when to try again): a region cannot tell a new
conversation from one kept at home (the caller names it), and one answered here under an id
home also keeps would be a second conversation under that id once home returns.

The directory is read from memory (infra/directory.py's DirectoryView): a user at home pays
no cross-region call, only the read of the conversation's region from the local store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from domain.errors import NotFound, Unavailable
from domain.limiter import Limit
from domain.regions import Placement, Reason, RegionRules, Regions
from domain.types import Tier, User
from gateway.buckets import Buckets
from gateway.home_client import HomeStore
from gateway.pipeline import ChatPipeline
from infra.directory import Directory, DirectorySnapshot, DirectoryView, publish_forever
from infra.tls import TlsConfig
from store.base import ConversationStore

# Metadata a gateway adds when it passes a message on to run away from the user's home.
SERVE_FOR_HEADER = "x-chat-serve-for"

# What is kept at home cannot be read, changed or continued while home is out.
HOME_OUT_REFUSAL = (
    "your home region {home!r} is unavailable; your conversations are kept there: try again "
    "when it is back"
)
# When to ask again: a region that publishes again is seen in within a directory read (1 s);
# when it will is unknown, and a refusal costs one read of memory.
HOME_OUT_RETRY_AFTER_S = 10.0


@dataclass(frozen=True, slots=True)
class Local:
    """Run it here, on this pipeline (this region's store, or the home region's)."""

    pipeline: ChatPipeline


@dataclass(frozen=True, slots=True)
class Forward:
    """Pass it on to a gateway of another region."""

    region: str
    addresses: tuple[str, ...]
    # The home region whose history it runs on there ('' : the region called decides).
    serve_for: str = ""


Route = Local | Forward


class NoRegions:
    """One region: every message runs here."""

    def __init__(self, pipeline: ChatPipeline) -> None:
        self._pipeline = pipeline

    async def route(
        self, user: User, conversation_id: str, pool: str | None, serve_for: str
    ) -> Route:
        return Local(self._pipeline)

    async def user_by_token_hash(self, digest: str) -> User | None:
        return None

    async def home_of(self, user: User) -> HomeStore | None:
        return None

    async def running_in(self, user: User, region: str) -> Forward | None:
        return None

    async def home_buckets(self, user: User) -> Buckets | None:
        return None

    def pipeline_for(self, serve_for: str) -> ChatPipeline:
        return self._pipeline

    async def publish(self, address: str, every_s: float) -> None:
        return None

    async def close(self, grace_s: float) -> None:
        return None


@dataclass
class RegionRouter:
    region: str
    view: DirectoryView
    store: ConversationStore
    pipeline: ChatPipeline
    # Builds the pipeline of a conversation running here for another region's user, on its
    # home region's store and buckets.
    away_pipeline: Callable[[HomeStore, Buckets], ChatPipeline]
    tls: TlsConfig
    rules: RegionRules
    registry: CollectorRegistry
    default_pool: str
    # Where this region's gateways publish their addresses.
    directory: Directory
    # Each tier's bucket limit (the same in every region).
    limits: Callable[[Tier], Limit]
    clock: Callable[[], float] = time.time
    # Each other region's store as this gateway reaches it, and the pipeline of conversations
    # running here for that region's users, built when first needed.
    _homes: dict[str, HomeStore] = field(default_factory=dict)
    _away: dict[str, ChatPipeline] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._routes = Counter("gateway_region_routes", "messages by the region chosen to serve",
                               ["reason", "region"], registry=self.registry)  # fmt: skip
        self._log = structlog.get_logger(component="regions", region=self.region)
        self.registry.register(RegionsSeen(self.view, self.rules, self.clock))

    async def user_by_token_hash(self, digest: str) -> User | None:
        """Another region's user, recognised by the directory (their home may be out)."""
        found = await self.view.user_by_token_hash(digest)
        return None if found is None else User(found.user_id, found.tier)

    async def route(
        self, user: User, conversation_id: str, pool: str | None, serve_for: str
    ) -> Route:
        """Where the message runs. pool: the one the caller named (None: the router's, of
        which only the default pool is known before the pipeline runs)."""
        snapshot = self.view.snapshot
        if serve_for and serve_for != self.region:
            return Local(self.pipeline_for(serve_for))
        known = await self.view.user(user.user_id)
        home, pinned = (known.home, known.pinned) if known else (self.region, False)
        regions = Regions(snapshot.regions, self.clock(), self.rules)
        if home != self.region:
            return self._from_elsewhere(snapshot, regions, user, home, pinned)
        current = await self._current_region(user, conversation_id)
        placement = regions.place(home, pinned, current, pool or self.default_pool)
        if placement.region == self.region or placement.reason is Reason.HOME:
            return self._here(user, Placement(self.region, placement.reason))
        self._count(user, placement, conversation_id)
        return Forward(placement.region, _gateways(snapshot, placement.region), serve_for=home)

    def _from_elsewhere(
        self, snapshot: DirectorySnapshot, regions: Regions, user: User, home: str, pinned: bool
    ) -> Route:
        if regions.alive(home):
            return Forward(home, _gateways(snapshot, home))
        if pinned:
            raise Unavailable(f"your home region {home!r} is unavailable; residency keeps "
                              "your conversations there", HOME_OUT_RETRY_AFTER_S)  # fmt: skip
        raise Unavailable(HOME_OUT_REFUSAL.format(home=home), HOME_OUT_RETRY_AFTER_S)

    def _here(self, user: User, placement: Placement) -> Local:
        self._count(user, placement, "")
        return Local(self.pipeline)

    def _count(self, user: User, placement: Placement, conversation_id: str) -> None:
        self._routes.labels(placement.reason.value, placement.region).inc()
        if placement.reason is not Reason.HOME:
            self._log.info("message routed", user=user.user_id, to=placement.region,
                           reason=placement.reason.value,
                           conversation=conversation_id)  # fmt: skip

    async def _current_region(self, user: User, conversation_id: str) -> str:
        try:
            return (await self.store.get_conversation(user.user_id, conversation_id)).region
        except NotFound:
            return ""

    async def home_of(self, user: User) -> HomeStore | None:
        """The store of the user's home region when that is another region (None: here, or a
        user the directory does not know, whose history can only be here). Unavailable while
        home is out: what is kept there cannot be read or changed meanwhile."""
        known = await self.view.user(user.user_id)
        if known is None or known.home == self.region:
            return None
        snapshot = self.view.snapshot
        if not Regions(snapshot.regions, self.clock(), self.rules).alive(known.home):
            raise Unavailable(HOME_OUT_REFUSAL.format(home=known.home), HOME_OUT_RETRY_AFTER_S)
        return self._home_store(snapshot, known.home)

    async def home_buckets(self, user: User) -> Buckets | None:
        """The token buckets the user's messages are charged to when they are another region's
        (None: this region's, also while the user's home is out, when none of their messages
        runs anywhere). Home in but none of its gateways answering: their level() is
        Unavailable."""
        try:
            home = await self.home_of(user)
        except Unavailable:
            return None
        return None if home is None else home.buckets(self.limits)

    async def running_in(self, user: User, region: str) -> Forward | None:
        """Where to reach an answer of the user's running in region (None: here). The call is
        passed on with the user's home region (`x-chat-serve-for`), which also marks it as
        passed on once: it is served where it arrives."""
        if not region or region == self.region:
            return None
        snapshot = self.view.snapshot
        if not Regions(snapshot.regions, self.clock(), self.rules).alive(region):
            raise Unavailable(f"region {region!r}, where this answer runs, is unavailable")
        known = await self.view.user(user.user_id)
        home = known.home if known else self.region
        return Forward(region, _gateways(snapshot, region), serve_for=home)

    def pipeline_for(self, serve_for: str) -> ChatPipeline:
        """The pipeline a call passed on for serve_for's user runs on: its history is theirs."""
        if serve_for and serve_for != self.region:
            return self._away_pipeline(self.view.snapshot, serve_for)
        return self.pipeline

    def _home_store(self, snapshot: DirectorySnapshot, home: str) -> HomeStore:
        """The home region's store, reached through the gateways its directory lists now (the
        last ones listed while it lists none: a call may still find one)."""
        store = self._homes.get(home)
        if store is None:
            store = self._homes[home] = HomeStore(home, _gateways(snapshot, home), self.tls)
        else:
            record = snapshot.regions.get(home)
            if record is not None and record.gateways:
                store.reach(record.gateways)
        return store

    def _away_pipeline(self, snapshot: DirectorySnapshot, home: str) -> ChatPipeline:
        store = self._home_store(snapshot, home)
        pipeline = self._away.get(home)
        if pipeline is None:
            pipeline = self.away_pipeline(store, store.buckets(self.limits))
            self._away[home] = pipeline
        return pipeline

    async def publish(self, address: str, every_s: float) -> None:
        """Says, every every_s, that this gateway serves the region at address."""

        async def once() -> None:
            await self.directory.publish_gateway(self.region, address)

        await publish_forever(once, every_s, "gateway")

    async def close(self, grace_s: float) -> None:
        """Lets answers running here for other regions finish (and be saved at home)."""
        for pipeline in self._away.values():
            await pipeline.close(grace_s)
        for store in self._homes.values():
            await store.close()
        self._away.clear()
        self._homes.clear()


class RegionsSeen(Collector):
    """The regions as this gateway's directory view has them, read at each scrape: whether
    each is in, its age and each pool's rung (what routing reads)."""

    def __init__(self, view: DirectoryView, rules: RegionRules, clock: Callable[[], float]) -> None:
        self._view = view
        self._rules = rules
        self._clock = clock

    def collect(self):
        now = self._clock()
        regions = self._view.snapshot.regions
        seen = Regions(regions, now, self._rules)
        up = GaugeMetricFamily("gateway_region_up", "1 while the region publishes in time",
                               labels=["region"])  # fmt: skip
        age = GaugeMetricFamily("gateway_region_age_seconds", "since the region last published",
                                labels=["region"])  # fmt: skip
        rung = GaugeMetricFamily("gateway_region_rung", "each region's ladder rung, per pool",
                                 labels=["region", "pool"])  # fmt: skip
        ready = GaugeMetricFamily("gateway_region_ready_replicas", "each region's ready replicas",
                                  labels=["region", "pool"])  # fmt: skip
        for name, record in sorted(regions.items()):
            up.add_metric([name], 1.0 if seen.alive(name) else 0.0)
            age.add_metric([name], record.age_s(now))
            for pool, capacity in sorted(record.pools.items()):
                rung.add_metric([name, pool], capacity.rung)
                ready.add_metric([name, pool], capacity.ready_replicas)
        return [up, age, rung, ready]


def _gateways(snapshot: DirectorySnapshot, region: str) -> tuple[str, ...]:
    record = snapshot.regions.get(region)
    addresses: Sequence[str] = record.gateways if record else ()
    if not addresses:
        raise Unavailable(f"region {region!r} has no gateway to pass the message to")
    return tuple(addresses)
