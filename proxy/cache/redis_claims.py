"""Flight claims in Redis, for several proxy replicas sharing one cache (see claims.py).

A claim is `SET {prefix}:{REDIS_FORMAT}:f:{flight} <owner> NX PX ttl` (config.py: replicas of
another format neither wait for nor release this one's claims); the owner refreshes it every
ttl/3 while its upstream call runs, so a replica that dies mid-flight frees the flight within
ttl. Each claim has its own owner token (the replica's id and a count): release deletes the key
only if it still holds this claim (a Lua check-and-delete), never a newer one of the same
replica, and publishes `{prefix}:{REDIS_FORMAT}:fdone:{flight}` unless another claim holds it. A
caller cancelled mid-claim (its client left while the SET was on its way: it may land all the
same) or mid-release still frees the flight at once: the SET and the release run in tasks of
their own that the cancellation does not reach. Waiters listen on one pattern subscription per
replica and also check every `check_s` that the key still exists (a lost message or a dead owner
cannot hold them). Any Redis error means: lead (claim) or stop waiting (settled).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Coroutine
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from proxy.cache.config import REDIS_FORMAT

# Delete the claim if it is this one, and wake the waiters, unless another claim holds the key
# (its owner wakes them when it is done).
_RELEASE = ("local held = redis.call('get', KEYS[1]) "
            "if held == ARGV[1] then redis.call('del', KEYS[1]) elseif held then return 0 end "
            "return redis.call('publish', KEYS[2], '1')")
_REFRESH = ("if redis.call('get', KEYS[1]) == ARGV[1] then "
            "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0")


class RedisClaims:
    def __init__(self, url: str, prefix: str = "vsp", ttl_s: float = 10.0,
                 check_s: float = 2.0) -> None:
        self._r: Any = Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.5)
        self._p = f"{prefix}:{REDIS_FORMAT}:"
        self._ttl_ms = max(1, int(ttl_s * 1000))
        self._check_s = check_s
        self._replica = uuid.uuid4().hex
        self._claims = itertools.count()
        # flight -> (this replica's claim of it: its owner token, the task refreshing it)
        self._keepers: dict[str, tuple[str, asyncio.Task[None]]] = {}
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._listener: asyncio.Task[None] | None = None
        self._subscribed: asyncio.Event | None = None
        self._unclaiming: set[asyncio.Task[None]] = set()

    async def claim(self, flight: str) -> bool:
        # each claim has its own owner token: with the replica's, a release that came late
        # deleted a newer claim of the flight by the same replica (found by a review)
        owner = f"{self._replica}:{next(self._claims)}"
        setting = asyncio.ensure_future(self._r.set(self._p + "f:" + flight, owner,
                                                    nx=True, px=self._ttl_ms))
        try:
            won = await asyncio.shield(setting)
        except asyncio.CancelledError:
            # the client left mid-claim; the SET may land all the same, and with nobody to
            # release it the other replicas waited out its TTL (found by a review)
            self._spawn(self._unclaim_after(setting, flight, owner))
            raise
        except (RedisError, OSError):
            return True
        if won:
            self._keepers[flight] = (owner, asyncio.create_task(self._keep(flight, owner)))
        return bool(won)

    async def _unclaim_after(self, setting: asyncio.Future[Any], flight: str,
                             owner: str) -> None:
        try:
            if not await setting:
                return  # another claim holds it: not this one to release
        except (RedisError, OSError):
            pass  # landed or not: the check-and-delete removes it only if it is this claim
        await self._unclaim(flight, owner)

    async def _unclaim(self, flight: str, owner: str) -> None:
        with contextlib.suppress(RedisError, OSError):
            await self._r.eval(_RELEASE, 2, self._p + "f:" + flight, self._p + "fdone:" + flight,
                               owner)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._unclaiming.add(task)
        task.add_done_callback(self._unclaiming.discard)
        return task

    async def _keep(self, flight: str, owner: str) -> None:
        while True:
            await asyncio.sleep(self._ttl_ms / 3000)
            with contextlib.suppress(RedisError, OSError):
                if not await self._r.eval(_REFRESH, 1, self._p + "f:" + flight, owner,
                                          self._ttl_ms):
                    return  # no longer ours (expired and taken): nothing to keep

    async def release(self, flight: str) -> None:
        held = self._keepers.pop(flight, None)
        if held is None:
            return
        owner, keeper = held
        keeper.cancel()
        # done even if we are cancelled
        await asyncio.shield(self._spawn(self._unclaim(flight, owner)))

    async def settled(self, flight: str, wait_s: float) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(flight, []).append(fut)
        deadline = time.monotonic() + wait_s
        try:
            with contextlib.suppress(TimeoutError):  # no subscription: the checks still work
                await self._listen()
            while time.monotonic() < deadline:
                step = min(self._check_s, deadline - time.monotonic())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(fut), step)
                    return
                if not await self._r.exists(self._p + "f:" + flight):
                    return  # released (message lost) or its owner died: look again
        except (RedisError, OSError):
            return
        finally:
            waiters = self._waiters.get(flight, [])
            if fut in waiters:
                waiters.remove(fut)
            if not waiters:
                self._waiters.pop(flight, None)

    async def _listen(self) -> None:
        if self._listener is None or self._listener.done():
            self._subscribed = asyncio.Event()
            self._listener = asyncio.create_task(self._run_listener(self._subscribed))
        assert self._subscribed is not None
        await asyncio.wait_for(self._subscribed.wait(), 2.0)

    async def _run_listener(self, subscribed: asyncio.Event) -> None:
        pubsub = self._r.pubsub()
        cut = len(self._p + "fdone:")
        try:
            await pubsub.psubscribe(self._p + "fdone:*")
            subscribed.set()
            while True:
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
                if msg is None or msg.get("type") != "pmessage":
                    continue
                channel = msg["channel"]
                flight = (channel.decode() if isinstance(channel, bytes) else channel)[cut:]
                for fut in self._waiters.get(flight, []):
                    if not fut.done():
                        fut.set_result(None)
        except (RedisError, OSError):
            return  # waiters fall back to their existence checks; the next wait resubscribes
        finally:
            with contextlib.suppress(RedisError, OSError):
                await pubsub.aclose()

    async def aclose(self) -> None:
        for flight in list(self._keepers):
            await self.release(flight)
        await asyncio.gather(*self._unclaiming, return_exceptions=True)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, RedisError, OSError):
                await self._listener
        await self._r.aclose()
