"""Per-key limits shared through Redis, for several workers or proxy replicas
(PROXY_KEY_LIMITS_SHARED=1 with PROXY_REDIS_URL): each limit holds across all of them, where
the local limiter (limits.py) gives every worker 1/PROXY_WORKERS of it.

The buckets are the local ones' (same refill, same debt rule), kept in one Redis hash per key
and updated by Lua scripts on Redis's own clock (TIME), so no two processes' clocks meet. A
concurrent request holds a lease (a member of a sorted set, scored by its expiry); this process
extends its leases every LEASE_S / 3, so a process that dies frees its leases within LEASE_S.
Any Redis error falls back to the local limiter for that request (counted, logged once a
minute): a Redis outage must not refuse or admit everything."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from proxy.limits import KeyLimit, KeyLimits

log = logging.getLogger("proxy.limits")

LEASE_S = 30.0

# Refill a bucket (fields l<b>, t<b>) to Redis's now; return its level. ARGV rate per minute.
_LUA_REFILL = """
local function refill(key, b, rate, now)
  local level = tonumber(redis.call('HGET', key, 'l' .. b) or rate)
  local at = tonumber(redis.call('HGET', key, 't' .. b) or now)
  return math.min(rate, level + (now - at) * rate / 60000)
end
local function keep(key, b, rate, level, now)
  redis.call('HSET', key, 'l' .. b, level, 't' .. b, now)
  -- once full again the state is worth nothing: let it go then
  local ms = math.ceil((rate - level) * 60000 / rate) + 1000
  if redis.call('PTTL', key) < ms then redis.call('PEXPIRE', key, ms) end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

# KEYS: bucket hash, lease set. ARGV: lease id, rpm, tpm, concurrent (-1: none), lease ms.
# Returns {0} admitted, or {1|2|3, wait ms}: concurrent, rpm, tpm refused.
_ENTER = _LUA_REFILL + """
local rpm, tpm, conc = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if conc >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= conc then return {1, 1000} end
end
local r, k
if rpm >= 0 then
  r = refill(KEYS[1], 'r', rpm, now)
  if r < 1 then return {2, math.ceil((1 - r) * 60000 / rpm)} end
end
if tpm >= 0 then
  k = refill(KEYS[1], 'k', tpm, now)
  if k <= 0 then return {3, math.max(1000, math.ceil(-k * 60000 / tpm))} end
end
if rpm >= 0 then keep(KEYS[1], 'r', rpm, r - 1, now) end
if tpm >= 0 then keep(KEYS[1], 'k', tpm, k, now) end
if conc >= 0 then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[1])
  redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[5]))
end
return {0}
"""

# KEYS: bucket hash, lease set. ARGV: lease id ('' none), tpm (-1 none), tokens.
_CHARGE = _LUA_REFILL + """
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[2], ARGV[1]) end
local tpm, n = tonumber(ARGV[2]), tonumber(ARGV[3])
if tpm >= 0 and n > 0 then keep(KEYS[1], 'k', tpm, refill(KEYS[1], 'k', tpm, now) - n, now) end
return 0
"""

# KEYS: lease sets. ARGV: lease ms, then one lease id per key. Extends this process's leases.
_EXTEND = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + tonumber(ARGV[1]), ARGV[i + 1])
  redis.call('PEXPIRE', key, tonumber(ARGV[1]))
end
return 0
"""

_WHICH = {1: "concurrent", 2: "rpm", 3: "tpm"}


class SharedKeyLimits:
    def __init__(self, local: KeyLimits, table: dict[str, KeyLimit], url: str,
                 prefix: str = "vsp", on_fallback: Callable[[], None] | None = None,
                 lease_s: float = LEASE_S) -> None:
        self.local = local  # the per-worker split: used when Redis fails
        self.table = table
        self._r: Any = Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.5)
        self._p = f"{prefix}:lim:"
        self._lease_ms = max(1, int(lease_s * 1000))
        self._on_fallback = on_fallback
        self._leases: dict[str, tuple[str, str]] = {}  # lease id -> (tenant, lease set key)
        self._extender: asyncio.Task[None] | None = None
        self._warned = 0.0
        self._jobs: set[asyncio.Task[None]] = set()

    def _limit(self, tenant: str) -> KeyLimit | None:
        return self.table.get(tenant) or self.table.get("*")

    def _keys(self, tenant: str) -> list[str]:
        return [self._p + tenant, self._p + tenant + ":c"]

    def _fallback(self, exc: Exception) -> None:
        if self._on_fallback is not None:
            self._on_fallback()
        now = time.monotonic()
        if now - self._warned > 60:
            self._warned = now
            log.warning("shared key limits: Redis failed (%s); each worker enforces its share",
                        exc)

    async def admit(self, tenant: str) -> str | None:
        """Count a request in; the lease to hand back to leave(), or None: no limit applies."""
        limit = self._limit(tenant)
        if limit is None:
            return None
        lease = uuid.uuid4().hex
        args = [lease, _num(limit.rpm), _num(limit.tpm), _num(limit.concurrent), self._lease_ms]
        try:
            got = await self._r.eval(_ENTER, 2, *self._keys(tenant), *args)
        except (RedisError, OSError) as exc:
            self._fallback(exc)
            self.local.enter(tenant)  # raises when the local share is spent
            return "local:" + lease
        if int(got[0]) != 0:
            which = _WHICH[int(got[0])]
            amount = {"concurrent": limit.concurrent, "rpm": limit.rpm, "tpm": limit.tpm}[which]
            unit = {"concurrent": "concurrent requests", "rpm": "requests per minute",
                    "tpm": "tokens per minute"}[which]
            raise self.local.refuse(which, f"{amount:g} {unit}", int(got[1]) / 1000)
        if limit.concurrent is not None:
            self._leases[lease] = (tenant, self._keys(tenant)[1])
            if self._extender is None or self._extender.done():
                self._extender = asyncio.get_running_loop().create_task(self._extend())
        return lease

    async def spend(self, tenant: str, lease: str, tokens: int) -> None:
        if lease.startswith("local:"):
            self.local.charge(tenant, tokens)
            return
        await self._charge(tenant, "", tokens)

    async def _charge(self, tenant: str, lease: str, tokens: int) -> None:
        limit = self._limit(tenant)
        if limit is None or (not lease and (limit.tpm is None or tokens <= 0)):
            return
        try:
            await self._r.eval(_CHARGE, 2, *self._keys(tenant), lease, _num(limit.tpm), tokens)
        except (RedisError, OSError) as exc:
            self._fallback(exc)  # a lease not returned expires within the lease time

    def release(self, tenant: str, lease: str, tokens_out: int) -> None:
        if lease.startswith("local:"):
            self.local.leave(tenant, tokens_out)
            return
        held = self._leases.pop(lease, None) is not None  # a concurrency lease to hand back
        limit = self._limit(tenant)
        if not held and (limit is None or limit.tpm is None or tokens_out <= 0):
            return  # nothing to tell Redis
        job = asyncio.get_running_loop().create_task(
            self._charge(tenant, lease if held else "", tokens_out))
        self._jobs.add(job)
        job.add_done_callback(self._jobs.discard)

    async def _extend(self) -> None:
        while self._leases:
            await asyncio.sleep(self._lease_ms / 3000)
            held = list(self._leases.items())
            if not held:
                return
            with contextlib.suppress(RedisError, OSError):
                await self._r.eval(_EXTEND, len(held), *(key for _, (_, key) in held),
                                   self._lease_ms, *(lease for lease, _ in held))

    async def aclose(self) -> None:
        if self._extender is not None:
            self._extender.cancel()
        if self._jobs:
            await asyncio.gather(*self._jobs, return_exceptions=True)
        await self._r.aclose()


def _num(value: float | None) -> float:
    return -1 if value is None else value
