"""The replica's prefix cache: eviction and spill exactly as plain LRUs do them."""

from __future__ import annotations

import random
from collections import OrderedDict

import pytest

from domain.prefix_cache import PrefixCache


class _PlainLru:
    """The prefix cache's eviction and spill with nothing remembered: the OrderedDicts alone,
    looked up at every step (what PrefixCache did before it remembered its LRUs' ends)."""

    def __init__(self, free: int, host_capacity: int) -> None:
        self.free, self.host_capacity, self.cached, self.host_used = free, host_capacity, 0, 0
        self.gpu: OrderedDict[object, list[int]] = OrderedDict()  # conversation -> [gpu, host]
        self.host: OrderedDict[object, list[int]] = OrderedDict()

    def take(self, blocks: int) -> None:
        from_free = min(blocks, self.free)
        self.free -= from_free
        blocks -= from_free
        while blocks:
            key, run = next(iter(self.gpu.items()))
            evicted = min(blocks, run[0])
            run[0] -= evicted
            self.cached -= evicted
            blocks -= evicted
            if not run[0]:
                del self.gpu[key]
            if self.host_capacity:
                run[1] += evicted
                self.host_used += evicted
                self.host[key] = run
                self.host.move_to_end(key)
                while self.host_used > self.host_capacity:
                    old_key, oldest = next(iter(self.host.items()))
                    dropped = min(oldest[1], self.host_used - self.host_capacity)
                    oldest[1] -= dropped
                    self.host_used -= dropped
                    if not oldest[1]:
                        del self.host[old_key]

    def claim(self, key: object, usable: int) -> tuple[int, int]:
        run = self.gpu.pop(key, None) or self.host.get(key)
        if run is None:
            return 0, 0
        self.host.pop(key, None)
        on_gpu = min(run[0], usable)
        in_host = min(run[1], usable - on_gpu) if on_gpu == run[0] else 0
        self.cached -= run[0]
        self.free += run[0] - on_gpu
        self.host_used -= run[1]
        return on_gpu, in_host

    def keep(self, key: object, full: int, blocks: int) -> None:
        if not full:
            self.free += blocks
            return
        self.claim(key, 0)
        self.gpu[key] = [full, 0]
        self.cached += full
        self.free += blocks - full


@pytest.mark.parametrize("seed", range(6))
def test_the_prefix_cache_evicts_and_spills_as_plain_lrus_do(seed: int) -> None:
    rng = random.Random(seed)
    host = rng.choice((0, 40, 400))
    cache, plain = PrefixCache(free=300, host_capacity=host), _PlainLru(300, host)
    held: list[int] = []  # blocks out with running requests, given back by keep
    for _ in range(3_000):
        op = rng.random()
        if op < 0.4 and cache.available:
            blocks = rng.randint(1, min(cache.available, 25))
            cache.take(blocks)
            plain.take(blocks)
            held.append(blocks)
        elif op < 0.7 and held:
            blocks = held.pop(rng.randrange(len(held)))
            key, full = rng.randrange(30), rng.randint(0, blocks)
            cache.keep(key, full, blocks)
            plain.keep(key, full, blocks)
        else:
            key, usable = rng.randrange(30), rng.randint(0, 60)
            assert cache.claim(key, usable) == plain.claim(key, usable)
        assert (cache.free, cache.cached, cache.host_used) == (
            plain.free,
            plain.cached,
            plain.host_used,
        )
        assert [(k, r.gpu) for k, r in cache.gpu_lru.items()] == [
            (k, r[0]) for k, r in plain.gpu.items()
        ]
        assert [(k, r.host) for k, r in cache.host_lru.items()] == [
            (k, r[1]) for k, r in plain.host.items()
        ]
