"""A replica's prefix cache: the KV blocks of finished turns, kept by conversation so the next
turn reads only what is new. Evicted least recently used first, a conversation's tail before its
head, and spilled to a host-RAM tier while it has room. Pure: counts blocks, holds no data.

Speed: a fleet simulation admits and finishes thousands of requests a second, so the cache keeps
one run of blocks per conversation, not one entry per block: a few dict operations per
admission and finish, whatever the prompt's length.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field

# _Run and _Shared are plain classes with their own __init__, not dataclasses: the
# dataclass-made __init__ stays interpreted Python when mypyc compiles this module
# (fleet/compiled.py), and a region makes one of each per message.


class _Run:
    """One conversation's cached KV: blocks [0, gpu) on the GPUs, [gpu, gpu + host) in host RAM.
    Eviction takes a run's tail first, so what stays is always a prefix: the part a next turn
    can use."""

    __slots__ = ("conversation", "gpu", "host")

    def __init__(self, conversation: Hashable, gpu: int = 0, host: int = 0) -> None:
        self.conversation = conversation
        self.gpu = gpu
        self.host = host


class _Shared:
    """A shared opening's key in the cache: never equal to a conversation's."""

    __slots__ = ("key",)

    def __init__(self, key: Hashable) -> None:
        self.key = key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Shared) and other.key == self.key

    def __hash__(self) -> int:
        return hash((_Shared, self.key))


@dataclass(slots=True)
class PrefixCache:
    """KV blocks of finished turns, kept by conversation until the room is needed: evicted from
    the GPUs least recently used first, spilled to host RAM (also LRU) while it has room.

    A run is one conversation's blocks, not one entry per block: admitting or finishing a
    request costs a few dict operations whatever its length, which the fleet simulation needs.
    The price: two requests of one conversation in flight at once do not share their blocks
    (a conversation has one message in flight). Across conversations only a shared opening
    (the system prompt) is shared: one run of its own, read by every conversation that has
    nothing cached yet; each conversation's own run still holds a copy of it."""

    free: int  # GPU blocks that hold nothing
    host_capacity: int
    cached: int = 0  # GPU blocks in runs: evictable
    host_used: int = 0
    gpu_lru: OrderedDict[Hashable, _Run] = field(default_factory=OrderedDict)
    host_lru: OrderedDict[Hashable, _Run] = field(default_factory=OrderedDict)
    # The runs at the LRUs' ends, remembered (None: look it up): growing answers nibble the
    # oldest run a few blocks a step into host RAM's newest, and with these most steps touch
    # no OrderedDict. Whatever moves or removes a remembered run forgets it (_forget).
    gpu_oldest: _Run | None = None
    host_oldest: _Run | None = None
    host_newest: _Run | None = None

    @property
    def available(self) -> int:
        return self.free + self.cached

    def take(self, blocks: int) -> None:
        """Hands out blocks: free ones first, then the least recently used cached ones."""
        from_free = min(blocks, self.free)
        self.free -= from_free
        blocks -= from_free
        while blocks:
            run = self.gpu_oldest
            if run is None:
                run = self.gpu_oldest = next(iter(self.gpu_lru.values()))
            evicted = min(blocks, run.gpu)
            run.gpu -= evicted
            self.cached -= evicted
            blocks -= evicted
            if not run.gpu:
                del self.gpu_lru[run.conversation]
                self.gpu_oldest = None
            self._spill(run, evicted)

    def _spill(self, run: _Run, blocks: int) -> None:
        if not self.host_capacity:
            return
        run.host += blocks
        self.host_used += blocks
        if run is not self.host_newest:
            self.host_lru[run.conversation] = run
            self.host_lru.move_to_end(run.conversation)
            self.host_newest = run
            if run is self.host_oldest:  # it moved off the front
                self.host_oldest = None
        while self.host_used > self.host_capacity:
            oldest = self.host_oldest
            if oldest is None:
                oldest = self.host_oldest = next(iter(self.host_lru.values()))
            dropped = min(oldest.host, self.host_used - self.host_capacity)
            oldest.host -= dropped
            self.host_used -= dropped
            if not oldest.host:
                del self.host_lru[oldest.conversation]
                self._forget(oldest)

    def claim(self, conversation: Hashable, usable: int) -> tuple[int, int]:
        """Takes a conversation's run for a request that can use its first `usable` blocks:
        returns (blocks it keeps on the GPUs, blocks it copies back from host RAM). Blocks past
        `usable` no longer match the conversation and are freed."""
        run = self.gpu_lru.pop(conversation, None) or self.host_lru.get(conversation)
        if run is None:
            return 0, 0
        self.host_lru.pop(conversation, None)
        self._forget(run)
        on_gpu = min(run.gpu, usable)
        in_host = min(run.host, usable - on_gpu) if on_gpu == run.gpu else 0
        self.cached -= run.gpu
        self.free += run.gpu - on_gpu
        self.host_used -= run.host
        return on_gpu, in_host

    def shared_hit(self, key: Hashable, usable: int) -> int:
        """How many of a shared opening's first `usable` blocks are on the GPUs; keeps them
        fresh. Missing ones are computed by the request and kept, as a real server would."""
        shared = _Shared(key)
        run = self.gpu_lru.get(shared)
        found = min(run.gpu, usable) if run is not None else 0
        if run is not None:
            self.gpu_lru.move_to_end(shared)
            if run is self.gpu_oldest:
                self.gpu_oldest = None
        if found < usable:
            self.claim(shared, 0)  # the shorter copy goes
            kept = min(usable, self.available)
            if kept:
                self.take(kept)
                self.gpu_lru[shared] = _Run(shared, gpu=kept)
                self.cached += kept
        return found

    def _forget(self, run: _Run) -> None:
        """The run left both LRUs, or moved within them: no end remembers it."""
        if run is self.gpu_oldest:
            self.gpu_oldest = None
        if run is self.host_oldest:
            self.host_oldest = None
        if run is self.host_newest:
            self.host_newest = None

    def keep(self, conversation: Hashable | None, full: int, blocks: int) -> None:
        """A request lets go of `blocks`: its `full` leading blocks become the conversation's run
        (the newest content wins over an older run of it), the rest are free."""
        if conversation is None or not full:
            self.free += blocks
            return
        self.claim(conversation, 0)  # frees an older run, if a request of it finished meanwhile
        self.gpu_lru[conversation] = _Run(conversation, gpu=full)
        self.cached += full
        self.free += blocks - full


__all__ = ["PrefixCache"]
