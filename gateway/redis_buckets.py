"""Per-user token buckets in Redis, shared by every gateway.

Each operation is one Lua script, so a reserve is atomic across all gateways: a burst spread
over many gateways cannot pass a bucket twice. The arithmetic is domain.limiter's, transcribed;
the clock is Redis's own (`TIME`), so gateways with skewed clocks agree. A bucket is a hash
{level, at} under `chat:bucket:<user_id>`; a full bucket has no key.

Redis unreachable (refused, timed out, read-only replica, out of memory): never an exception.
`RedisUnavailablePolicy` decides per tier. By default Plus fails open (admitted, nothing
recorded: a paying user keeps chatting through a Redis blip) and Free fails closed (refused,
retry after 5 s: unmetered free traffic is what an outage must not let in). Settles during an
outage are dropped. Each failure logs a warning; the next call reconnects by itself.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import structlog
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError, OutOfMemoryError, ReadOnlyError, TimeoutError

from domain import limiter
from domain.types import Tier

# Every key the gateways keep in Redis starts with this (gateway config `redis_prefix`);
# regions sharing one Redis each take their own, so their buckets never meet.
REDIS_PREFIX = "chat:"
KEY_PREFIX = REDIS_PREFIX + "bucket:"
DEFAULT_FAIL_OPEN: Mapping[Tier, bool] = {Tier.FREE: False, Tier.PLUS: True}
UNAVAILABLE = (ConnectionError, TimeoutError, ReadOnlyError, OutOfMemoryError)

# Shared head of every script. KEYS[1]: the bucket; ARGV[1], ARGV[2]: capacity, refill per second.
# Numbers go back as '%.17g' strings: Redis would truncate a Lua number reply to an integer.
_PRELUDE = """
local key = KEYS[1]
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000

local function fmt(x)
  return string.format('%.17g', x)
end

-- Bucket.refilled; a missing key is a full bucket.
local function current()
  local stored = redis.call('HMGET', key, 'level', 'at')
  local level, at = tonumber(stored[1]), tonumber(stored[2])
  if level == nil or at == nil then
    return capacity
  end
  return math.min(capacity, level + math.max(0, now - at) * rate)
end

-- A full bucket needs no key; any other key expires once the bucket would be full again.
local function store(level)
  if level >= capacity then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'level', fmt(level), 'at', fmt(now))
  redis.call('PEXPIRE', key, math.ceil((capacity - level) / rate * 1000))
end
"""

# limiter.reserve. ARGV[3]: amount. Returns {admitted, level, at, retry_after_s}.
# A refusal writes nothing: refilling later from the stored state gives the same level.
RESERVE_LUA = (
    _PRELUDE
    + """
local amount = tonumber(ARGV[3])
local level = current()
if amount > capacity then
  return {0, fmt(level), fmt(now), 'inf'}
end
if level < amount then
  return {0, fmt(level), fmt(now), fmt((amount - level) / rate)}
end
level = level - amount
store(level)
return {1, fmt(level), fmt(now), '0'}
"""
)

# limiter.settle. ARGV[3], ARGV[4]: reserved, actual. Returns {level, at}.
SETTLE_LUA = (
    _PRELUDE
    + """
local level = math.min(capacity, current() + tonumber(ARGV[3]) - tonumber(ARGV[4]))
store(level)
return {fmt(level), fmt(now)}
"""
)

# The refilled bucket, read only. Returns {level, at}.
LEVEL_LUA = (
    _PRELUDE
    + """
return {fmt(current()), fmt(now)}
"""
)


def bucket_key(user_id: str, prefix: str = REDIS_PREFIX) -> str:
    return f"{prefix}bucket:{user_id}"


def connect(url: str, timeout_s: float = 0.5) -> Redis:
    """A client for the buckets. Short timeouts: an outage should cost a request half a second,
    not redis-py's default of ten backed-off retries. One immediate retry, on a dropped
    connection only (a pooled connection gone stale when Redis restarted); never on a timeout,
    because a script that timed out may have run and a second run would charge twice."""
    return Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1, (ConnectionError,)),
    )


@dataclass(frozen=True, slots=True)
class RedisUnavailablePolicy:
    """What a tier gets while Redis cannot be reached (see the module's docstring)."""

    fail_open: Mapping[Tier, bool] = field(default_factory=lambda: dict(DEFAULT_FAIL_OPEN))
    retry_after_s: float = 5.0

    def opens(self, tier: Tier) -> bool:
        return self.fail_open.get(tier, DEFAULT_FAIL_OPEN.get(tier, False))

    def decide(self, tier: Tier, limit: limiter.Limit, now: float) -> limiter.Decision:
        if self.opens(tier):
            return limiter.Decision(limiter.Bucket(limit.capacity, now), True)
        return limiter.Decision(limiter.Bucket(0.0, now), False, self.retry_after_s)

    def assumed(self, tier: Tier, limit: limiter.Limit, now: float) -> limiter.Bucket:
        # What /v1/limits shows: a tier that fails open looks full, one that fails closed empty.
        return self.decide(tier, limit, now).bucket


class RedisBuckets:
    """The async interface of gateway.buckets.InProcessBuckets, kept in Redis."""

    def __init__(
        self,
        client: Redis,
        limits: dict[Tier, limiter.Limit],
        fail_open: Mapping[Tier, bool] | None = None,
        on_unavailable: Callable[[Tier, bool], None] = lambda tier, admitted: None,
        prefix: str = REDIS_PREFIX,
    ) -> None:
        self._limits = limits
        self._prefix = prefix
        # Told of each reservation decided without Redis, and whether it was admitted: the
        # gateway's metrics count the store failing open (gateway_bucket_store_unavailable).
        self._on_unavailable = on_unavailable
        self._policy = RedisUnavailablePolicy({**DEFAULT_FAIL_OPEN, **(fail_open or {})})
        # register_script: EVALSHA, loading the script again on NOSCRIPT (a restarted Redis).
        self._reserve = client.register_script(RESERVE_LUA)
        self._settle = client.register_script(SETTLE_LUA)
        self._level = client.register_script(LEVEL_LUA)
        # Reservations admitted during an outage, never taken from a bucket: their settle must
        # charge what was used, not give back what was never reserved.
        self._unrecorded: Counter[tuple[str, float]] = Counter()
        self._log = structlog.get_logger(component="redis_buckets")

    def limit(self, tier: Tier) -> limiter.Limit:
        return self._limits[tier]

    async def reserve(self, user_id: str, tier: Tier, amount: float) -> limiter.Decision:
        limit = self._limits[tier]
        try:
            admitted, level, at, retry = await self._reserve(
                keys=[bucket_key(user_id, self._prefix)], args=_limit_args(limit, amount)
            )
        except UNAVAILABLE as error:
            self._warn("reserve", tier, error)
            decision = self._policy.decide(tier, limit, time.time())
            self._on_unavailable(tier, decision.admitted)
            if decision.admitted:
                self._unrecorded[(user_id, amount)] += 1
            return decision
        bucket = limiter.Bucket(float(level), float(at))
        return limiter.Decision(bucket, bool(admitted), float(retry))

    async def settle(self, user_id: str, tier: Tier, reserved: float, actual: float) -> None:
        if self._take_unrecorded(user_id, reserved):
            reserved = 0.0
        try:
            await self._settle(
                keys=[bucket_key(user_id, self._prefix)],
                args=_limit_args(self._limits[tier], reserved, actual),
            )
        except UNAVAILABLE as error:
            self._warn("settle dropped", tier, error)

    async def level(self, user_id: str, tier: Tier) -> limiter.Bucket:
        limit = self._limits[tier]
        try:
            level, at = await self._level(
                keys=[bucket_key(user_id, self._prefix)], args=_limit_args(limit)
            )
        except UNAVAILABLE as error:
            self._warn("level", tier, error)
            return self._policy.assumed(tier, limit, time.time())
        return limiter.Bucket(float(level), float(at))

    def _take_unrecorded(self, user_id: str, reserved: float) -> bool:
        # Matched by amount: two reservations of equal amount settle to the same total whichever
        # of them is taken as the unrecorded one.
        key = (user_id, reserved)
        if not self._unrecorded[key]:
            return False
        self._unrecorded[key] -= 1
        if not self._unrecorded[key]:
            del self._unrecorded[key]
        return True

    def _warn(self, operation: str, tier: Tier, error: Exception) -> None:
        self._log.warning(
            "redis unreachable; token bucket policy applies",
            operation=operation,
            tier=tier.value,
            fail_open=self._policy.opens(tier),
            error=f"{type(error).__name__}: {error}",
        )


def _limit_args(limit: limiter.Limit, *numbers: float) -> list[float]:
    # redis-py sends a float as repr(): the shortest string that parses back to the same double.
    return [float(limit.capacity), float(limit.refill_per_s), *map(float, numbers)]
