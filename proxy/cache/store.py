"""The entries: the source of truth (the vector index only holds their ids).

`MemoryStore` is the embedded default: an LRU bounded by `max_entries`, a TTL checked on read,
flush by namespace (the model), and an optional JSON-lines snapshot loaded at open and written
at close. `RedisStore` (redis_store.py) has the same shape, shared by several replicas.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from proxy.cache.entry import Entry, better


class StoreUnavailable(Exception):
    """The store cannot be reached (Redis down): the cache is bypassed, the proxy answers."""


class Store(Protocol):
    async def get_exact(self, exact: str) -> Entry | None: ...

    async def get_many(self, ids: list[int]) -> list[Entry | None]: ...

    async def put(self, entry: Entry) -> Entry | None:
        """Store (or replace the entry under the same exact key); None when it kept the old."""

    async def changes(self) -> list[Entry]:
        """Entries other writers added since the last call (catch-up for the index)."""

    def take_reset(self) -> bool:
        """True once when the shared store lost its data: the index must be rebuilt."""

    def forget(self, entry_id: int) -> None:
        """A reader found entry_id gone (expired, evicted elsewhere): report it to the index."""

    def take_removed(self) -> list[int]:
        """Ids gone from the store since the last call, which the index may still hold."""

    async def flush(self, namespace: str | None = None) -> int: ...

    async def count(self) -> int: ...

    async def aclose(self) -> None: ...


class MemoryStore:
    def __init__(self, max_entries: int, ttl: float | None, snapshot: Path | None = None,
                 on_evict: Callable[[int], None] | None = None) -> None:
        self.max_entries, self.ttl, self.snapshot = max_entries, ttl, snapshot
        self._removed: list[int] = []
        self._on_evict = on_evict
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self._born: deque[tuple[float, int]] = deque()  # (created, id) in the order put
        self._exact: dict[str, int] = {}
        self._next = 1
        self._loaded: list[Entry] = []

    async def open(self) -> MemoryStore:
        if self.snapshot is not None and self.snapshot.exists():
            lines = await asyncio.to_thread(self.snapshot.read_bytes)
            saved = [Entry.from_json(line) for line in lines.splitlines() if line.strip()]
            for entry in sorted(saved, key=lambda e: e.created):  # oldest first, as put
                entry.id = 0
                if await self.put(entry) is not None:
                    self._loaded.append(entry)
        return self

    def _expired(self, entry: Entry) -> bool:
        return self.ttl is not None and entry.created + self.ttl < time.time()

    def _drop(self, entry_id: int) -> None:
        entry = self._entries.pop(entry_id, None)
        if entry is not None:
            if self._exact.get(entry.exact) == entry_id:
                del self._exact[entry.exact]
            self._removed.append(entry_id)

    def _live(self, entry_id: int) -> Entry | None:
        entry = self._entries.get(entry_id)
        if entry is None:
            return None
        if self._expired(entry):
            self._drop(entry_id)
            return None
        self._entries.move_to_end(entry_id)
        return entry

    async def get_exact(self, exact: str) -> Entry | None:
        entry_id = self._exact.get(exact)
        return self._live(entry_id) if entry_id is not None else None

    async def get_many(self, ids: list[int]) -> list[Entry | None]:
        return [self._live(i) for i in ids]

    async def put(self, entry: Entry) -> Entry | None:
        old_id = self._exact.get(entry.exact)
        old = self._entries.get(old_id) if old_id is not None else None
        if old is not None and not self._expired(old) and not better(entry, old):
            return None
        if old_id is not None:
            self._drop(old_id)
        entry.id = self._next
        self._next += 1
        self._entries[entry.id] = entry
        if self.ttl:
            self._born.append((entry.created, entry.id))
            if len(self._born) > 2 * len(self._entries) + 1024:  # mostly ids dropped since:
                self._born = deque(sorted((e.created, i) for i, e in self._entries.items()))
        self._exact[entry.exact] = entry.id
        while len(self._entries) > self.max_entries:
            victim = next(iter(self._entries))
            self._drop(victim)
            if self._on_evict is not None:
                self._on_evict(victim)
        return entry

    async def changes(self) -> list[Entry]:
        loaded, self._loaded = self._loaded, []
        return [e for e in loaded if e.id in self._entries]

    def take_reset(self) -> bool:
        return False

    def forget(self, entry_id: int) -> None:
        self._removed.append(entry_id)

    def take_removed(self) -> list[int]:
        removed, self._removed = self._removed, []
        return removed

    async def flush(self, namespace: str | None = None) -> int:
        ids = [i for i, e in self._entries.items() if namespace is None or e.namespace == namespace]
        for i in ids:
            self._drop(i)
        return len(ids)

    async def count(self) -> int:
        """Live entries: those whose TTL has passed are dropped first, oldest first (each
        once: amortised O(1) a call), so stats and proxy_cache_entries do not count them."""
        while self._born and self.ttl and self._born[0][0] + self.ttl < time.time():
            _, entry_id = self._born.popleft()
            self._drop(entry_id)  # gone already (replaced, evicted, flushed): nothing to do
        return len(self._entries)

    async def aclose(self) -> None:
        if self.snapshot is None:
            return
        data = b"\n".join(e.to_json() for e in self._entries.values() if not self._expired(e))
        path = self.snapshot

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(path.suffix + ".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)

        await asyncio.to_thread(write)
