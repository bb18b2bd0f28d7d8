"""Redis as the shared store for several proxy replicas (redis.asyncio).

Keys under `{prefix}:{REDIS_FORMAT}:` (config.py: another format's entries are not found):
`seq` (id counter), `e:{id}` (entry JSON, no vector), `v:{id}`
(partition + float32 vector), `x:{exact}` (id), all with the TTL; `log` (zset id->id, what
replicas catch up on), `lru` (zset id->last use, the size bound), `born` (zset id->write time:
what the TTL has expired, dropped from the zsets before counting or bounding), `ns:{namespace}`
(set of ids), `namespaces` (the set of those namespaces),
`epoch` (changes when Redis lost its data or was flushed: replicas then rebuild their index).
Each replica keeps its own FAISS index; `changes()` returns the entries logged since its cursor.
Any connection error raises StoreUnavailable (the cache is bypassed) and the store stays "down"
for `retry_after` seconds; then one call tries Redis again while the others keep bypassing, so
a dead Redis costs one refused connect and a hung one one socket timeout (1 s) per
`retry_after`. A command is retried once after a connection error (a connection Redis closed,
as after its restart), never after a timeout: that retry waited out the socket timeout twice.
Going down and answering again are each logged once (a WARNING with the error, an INFO), not
once a request: `proxy_cache_backend_errors_total` counts the requests.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from proxy.cache.config import REDIS_FORMAT
from proxy.cache.entry import Entry, better
from proxy.cache.store import StoreUnavailable

T = TypeVar("T")
log = logging.getLogger("proxy.cache")
_PART = 64  # hex chars of a partition digest, in front of the vector bytes


class RedisStore:
    def __init__(self, url: str, max_entries: int, ttl: float | None, prefix: str = "vsp",
                 on_evict: Callable[[int], None] | None = None, retry_after: float = 0.5,
                 page: int = 1000) -> None:
        # retried once on a connection error, never on a timeout (see the module's docstring)
        retry = Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,))
        self._r: Any = Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=0.5,
                                      retry=retry)
        self.max_entries, self.ttl, self._p = max_entries, ttl, f"{prefix}:{REDIS_FORMAT}:"
        self._removed: list[int] = []
        self._on_evict = on_evict
        self._retry_after, self._page = retry_after, page
        self._down_until = 0.0  # > 0: Redis failed; until then the cache is bypassed
        self._probing = False  # one call tries Redis again after that; the rest bypass
        self._cursor = 0
        self._epoch: bytes | None = None
        self._reset = False

    async def open(self) -> RedisStore:
        # the proxy starts anyway; the cache is bypassed until Redis answers
        with contextlib.suppress(StoreUnavailable):
            await self._call(self._check_epoch)
        return self

    async def _call(self, op: Callable[[], Awaitable[T]]) -> T:
        probe = self._down_until > 0
        if probe and (time.monotonic() < self._down_until or self._probing):
            raise StoreUnavailable("redis is down")
        self._probing = probe  # a hung Redis costs the socket timeout once, not every caller
        try:
            result = await op()
        except (RedisError, OSError) as exc:
            if self._down_until == 0:  # up until now (calls in flight then fail too: once)
                log.warning("cache store: Redis failed (%s); the cache is bypassed until it "
                            "answers again", exc)
            self._down_until = time.monotonic() + self._retry_after
            raise StoreUnavailable(str(exc)) from exc
        finally:
            if probe:
                self._probing = False
        if self._down_until > 0:
            log.info("cache store: Redis answers again; the cache is in use again")
        self._down_until = 0.0
        return result

    def _px(self) -> int | None:
        return int(self.ttl * 1000) if self.ttl else None

    async def _check_epoch(self) -> None:
        key = self._p + "epoch"
        await self._r.set(key, uuid.uuid4().hex, nx=True)
        epoch = await self._r.get(key)
        if epoch != self._epoch:
            if self._epoch is not None:
                self._reset = True
            self._epoch, self._cursor = epoch, 0

    def take_reset(self) -> bool:
        """True once after Redis lost its data or was flushed: drop the local index."""
        reset, self._reset = self._reset, False
        return reset

    def forget(self, entry_id: int) -> None:
        self._removed.append(entry_id)

    def take_removed(self) -> list[int]:
        removed, self._removed = self._removed, []
        return removed

    async def get_exact(self, exact: str) -> Entry | None:
        async def op() -> Entry | None:
            raw_id = _id(await self._r.get(self._p + "x:" + exact))
            return None if raw_id is None else (await self._fetch([raw_id]))[0]
        return await self._call(op)

    async def get_many(self, ids: list[int]) -> list[Entry | None]:
        if not ids:
            return []
        return await self._call(lambda: self._fetch(ids))

    async def _fetch(self, ids: list[int]) -> list[Entry | None]:
        raws = await self._r.mget([f"{self._p}e:{i}" for i in ids])
        found = {str(i): time.time() for i, raw in zip(ids, raws, strict=True) if raw}
        if found:
            await self._r.zadd(self._p + "lru", found, xx=True)
        return [_entry(raw) if raw else None for raw in raws]

    async def put(self, entry: Entry) -> Entry | None:
        return await self._call(lambda: self._put(entry))

    async def _put(self, entry: Entry) -> Entry | None:
        p, px = self._p, self._px()
        old_id = _id(await self._r.get(p + "x:" + entry.exact))
        if old_id is not None:
            old = (await self._fetch([old_id]))[0]
            if old is not None and not better(entry, old):
                return None
        entry.id = int(await self._r.incr(p + "seq"))
        vector, entry.vector = entry.vector, None
        pipe = self._r.pipeline(transaction=True)
        pipe.set(f"{p}e:{entry.id}", entry.to_record(), px=px)
        if vector is not None:
            pipe.set(f"{p}v:{entry.id}", entry.partition.encode() + vector, px=px)
        pipe.set(p + "x:" + entry.exact, entry.id, px=px)
        pipe.zadd(p + "log", {str(entry.id): entry.id})
        now = time.time()
        pipe.zadd(p + "lru", {str(entry.id): now})
        pipe.zadd(p + "born", {str(entry.id): now})
        pipe.sadd(p + "ns:" + entry.namespace, entry.id)
        pipe.sadd(p + "namespaces", entry.namespace)
        await pipe.execute()
        entry.vector = vector
        if old_id is not None:
            await self._delete([old_id], keep_exact=True)
        await self._bound()
        return entry

    async def _prune(self) -> None:
        """Drop from the zsets the entries whose TTL has passed (Redis expired their keys)."""
        if not self.ttl:
            return
        dead = await self._r.zrangebyscore(self._p + "born", "-inf", time.time() - self.ttl,
                                           start=0, num=10_000)
        if dead:
            await self._delete([int(i) for i in dead])

    async def _bound(self) -> None:
        await self._prune()
        extra = int(await self._r.zcard(self._p + "lru")) - self.max_entries
        if extra > 0:
            victims = [int(v) for v in await self._r.zrange(self._p + "lru", 0, extra - 1)]
            gone = await self._delete(victims)
            if self._on_evict is not None and gone:
                self._on_evict(gone)

    async def _delete(self, ids: list[int], keep_exact: bool = False) -> int:
        """Delete entries by id; returns how many still existed."""
        p = self._p
        raws = await self._r.mget([f"{p}e:{i}" for i in ids])
        gone = [i for i, raw in zip(ids, raws, strict=True) if not raw]
        # a record past its TTL no longer names its namespace: leave every namespace's set
        # (they only grew, one id for every entry ever expired; found by a review)
        spaces = await self._r.smembers(p + "namespaces") if gone else ()
        pipe = self._r.pipeline(transaction=False)
        for space in spaces:
            pipe.srem(p.encode() + b"ns:" + space, *gone)
        for i, raw in zip(ids, raws, strict=True):
            pipe.delete(f"{p}e:{i}", f"{p}v:{i}")
            pipe.zrem(p + "log", str(i))
            pipe.zrem(p + "lru", str(i))
            pipe.zrem(p + "born", str(i))
            entry = _entry(raw) if raw else None
            if entry is not None:
                pipe.srem(p + "ns:" + entry.namespace, i)
                if not keep_exact:
                    pipe.eval(_DEL_IF, 1, p + "x:" + entry.exact, str(i))
        await pipe.execute()
        self._removed.extend(ids)
        return sum(1 for raw in raws if raw)

    async def changes(self) -> list[Entry]:
        """Entries (partition, id, vector only) logged since the last call."""
        return await self._call(self._changes)

    async def _changes(self) -> list[Entry]:
        await self._check_epoch()
        out: list[Entry] = []
        while True:
            ids = [int(i) for i in await self._r.zrangebyscore(
                self._p + "log", f"({self._cursor}", "+inf", start=0, num=self._page)]
            if not ids:
                return out
            self._cursor = ids[-1]
            raws = await self._r.mget([f"{self._p}v:{i}" for i in ids])
            for i, raw in zip(ids, raws, strict=True):
                try:  # a record this version cannot read is left out (it raised: a 500)
                    partition = raw[:_PART].decode() if raw else ""
                except UnicodeDecodeError:
                    continue
                if len(partition) == _PART and (len(raw) - _PART) % 4 == 0:
                    out.append(Entry(exact="", partition=partition, namespace="",
                                     kind="", text=None, max_tokens=None, answer={},
                                     vector=raw[_PART:], id=i))

    async def flush(self, namespace: str | None = None) -> int:
        async def op() -> int:
            if namespace is not None:
                ids = [int(i) for i in await self._r.smembers(self._p + "ns:" + namespace)]
                gone = await self._delete(ids) if ids else 0
                await self._r.delete(self._p + "ns:" + namespace)
                return gone
            count = 0
            async for key in self._r.scan_iter(match=self._p + "*", count=1000):
                name = key[len(self._p):]
                if not (name.startswith(_FLUSHED) or name in _FLUSHED_KEYS):
                    continue  # `seq` (ids are never reused)
                count += name.startswith(b"e:")
                await self._r.unlink(key)
            self._epoch, self._cursor = None, 0
            await self._check_epoch()
            return count
        return await self._call(op)

    async def count(self) -> int:
        async def op() -> int:
            await self._prune()
            return int(await self._r.zcard(self._p + "lru"))
        return await self._call(op)

    async def ping(self) -> Any:
        return await self._call(self._r.ping)

    async def aclose(self) -> None:
        await self._r.aclose()


def _id(raw: bytes | None) -> int | None:
    """An `x:` pointer's entry id; None for one this version cannot read."""
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _entry(raw: bytes) -> Entry | None:
    """The entry stored as `raw`, or None (a miss, replaced by the next store) for a record this
    version cannot read: corrupted, or another version's or program's under the prefix (it
    raised out of the lookup: a 500 for every identical request until its TTL; a review)."""
    try:
        entry = Entry.from_record(raw)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return entry if isinstance(entry.answer, dict) else None


# What a whole flush deletes: the entries and their indexes. Not `seq`: a reused id would let
# an `x:` pointer written during the flush name another question's entry. (The shared per-key
# limits, under `{prefix}:lim:`, are outside this format's keys: the scan never sees them.)
_FLUSHED = (b"e:", b"v:", b"x:", b"ns:")
_FLUSHED_KEYS = (b"log", b"lru", b"born", b"epoch", b"namespaces")

# Delete x:{exact} only if it still points at this id (a newer entry may have replaced it).
_DEL_IF = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"
