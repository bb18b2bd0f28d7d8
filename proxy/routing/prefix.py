"""prefix: send a request where its prompt's leading blocks were recently served, unless that
replica is much busier than the idlest one.

Each replica has a bounded LRU set of the block hashes (blocks.py) this proxy sent it. A request
scores, on each healthy replica, gain = the share of its full blocks found there as an unbroken
prefix, minus the load guard's penalty (load.py). The best score wins; ties go to the replica
that rendezvous hashing of the first block prefers, so proxies that have never talked agree
where a new prefix goes. The winner's set then holds the whole chain. A chain is touched from
its last block to its first, so the LRU drops a prefix's tail before its head, as vLLM does.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from proxy.routing.backend import Backend
from proxy.routing.blocks import chain_async
from proxy.routing.least_loaded import LeastLoaded
from proxy.routing.load import LoadGuard
from proxy.routing.protocol import Choice, RouteRequest
from proxy.routing.rendezvous import rank


class Blocks(Protocol):
    """What one replica probably holds: how much of a chain, and record a chain sent there."""

    def matched(self, hashes: Sequence[int]) -> int: ...

    def add(self, hashes: Sequence[int]) -> None: ...

    def discard(self, hashes: Sequence[int]) -> None: ...


class BlockSet:
    """A bounded LRU set of block hashes: what one replica probably still has cached."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def matched(self, hashes: Sequence[int]) -> int:
        n = 0
        for h in hashes:
            if h not in self.blocks:
                break
            n += 1
        return n

    def add(self, hashes: Sequence[int]) -> None:
        blocks = self.blocks
        for h in reversed(hashes):
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)

    def discard(self, hashes: Sequence[int]) -> None:
        for h in hashes:
            self.blocks.pop(h, None)


class Prefix:
    name = "prefix"
    wants_tokens = True

    def __init__(self, block_size: int, capacity: int, guard: LoadGuard,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.block_size = block_size
        self.capacity = capacity
        self.guard = guard
        self.clock = clock
        self.sets: dict[str, BlockSet] = {}
        self.fallback = LeastLoaded(clock)

    def blocks_of(self, backend: Backend) -> Blocks:
        found = self.sets.get(backend.url)
        if found is None:
            found = self.sets[backend.url] = BlockSet(self.capacity)
        return found

    async def key(self, request: RouteRequest | None) -> object:
        if request is None or not request.tokens:
            return None
        return await chain_async(request.tokens, self.block_size)

    def choose(self, candidates: Sequence[Backend], key: object) -> Choice:
        if not isinstance(key, list) or not key:  # no full block: nothing to be cached
            return self.fallback.choose(candidates, None)
        hashes: list[int] = key
        matched = [self.blocks_of(b).matched(hashes) for b in candidates]
        penalties = self.guard.penalties(self.guard.loads(candidates, self.clock()))
        order = rank(hashes[0], candidates)
        best = max(range(len(candidates)), key=lambda i: (
            matched[i] / len(hashes) - penalties[i], -order[i]))
        chosen = candidates[best]
        self.blocks_of(chosen).add(hashes)
        most = max(range(len(candidates)), key=lambda i: (matched[i], -order[i]))
        spilled = candidates[most] if matched[most] > matched[best] else None
        return Choice(chosen, affinity=matched[best] > 0, spilled_from=spilled)

    def refused(self, choice: Choice, key: object) -> None:
        """The replica did not take the chain (or lost its cache with its engine): forget it
        there, or the chain would keep pulling the prompt back to a replica that holds none of
        it once that one is up again (a review)."""
        if isinstance(key, list) and key:
            self.blocks_of(choice.backend).discard(key)
