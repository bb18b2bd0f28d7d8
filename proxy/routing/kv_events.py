"""kv-events: prefix routing on what each vLLM replica says it holds, not on what this proxy
sent it. vLLM (--kv-events-config, ZMQ publisher) reports every KV block it stores and evicts,
with the block's tokens; this policy rebuilds each replica's set of block hashes from those
reports in its own hash (blocks.py), so it matches a request's chain exactly, evictions
included. Blocks of requests sent but not yet reported count from a small optimistic LRU, so a
burst of one new prefix does not scatter before vLLM's first report arrives.

Scoring and the load guard are prefix.py's. A gap in a replica's sequence numbers (a slow
subscriber, a restarted vLLM) empties what is known of it: better no affinity than a wrong one.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from proxy.routing.backend import Backend
from proxy.routing.blocks import chain
from proxy.routing.load import LoadGuard
from proxy.routing.prefix import Blocks, BlockSet, Prefix

log = logging.getLogger("proxy.routing")
RECENT_BLOCKS = 4096  # per replica: blocks sent but not yet reported


class Reported:
    """One replica's blocks as its vLLM reported them, plus the recent optimistic ones."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.ours: dict[object, int] = {}  # vLLM's block hash -> our hash
        self.held: Counter[int] = Counter()  # our hash -> how many vLLM blocks carry it
        self.recent = BlockSet(RECENT_BLOCKS)
        self.last_seq: int | None = None
        self.warned = False

    def matched(self, hashes: Sequence[int]) -> int:
        n = 0
        for h in hashes:
            if h not in self.held:
                break
            n += 1
        return max(n, self.recent.matched(hashes))

    def add(self, hashes: Sequence[int]) -> None:
        self.recent.add(hashes)

    def discard(self, hashes: Sequence[int]) -> None:
        self.recent.discard(hashes)  # only our guess: what vLLM reports, it reports removed

    def stored(self, vllm_hashes: Sequence[object], parent: object, tokens: Sequence[int],
               block_size: int) -> None:
        if block_size != self.block_size:
            if not self.warned:
                self.warned = True
                log.warning("vLLM reports %d-token blocks, PROXY_ROUTING_BLOCK_SIZE is %d: "
                            "its events are ignored", block_size, self.block_size)
            return
        prev = 0 if parent is None else self.ours.get(parent)
        if prev is None:  # its parent was never reported to us: cannot place the chain
            return
        for i, vh in enumerate(vllm_hashes):
            ours = chain(tokens[i * block_size:(i + 1) * block_size], block_size, prev)
            if not ours:
                return
            prev = ours[0]
            if self.ours.get(vh) != prev:
                self.ours[vh] = prev
                self.held[prev] += 1

    def removed(self, vllm_hashes: Sequence[object]) -> None:
        for vh in vllm_hashes:
            ours = self.ours.pop(vh, None)
            if ours is not None:
                self.held[ours] -= 1
                if self.held[ours] <= 0:
                    del self.held[ours]

    def cleared(self) -> None:
        self.ours.clear()
        self.held.clear()

    def apply(self, seq: int, batch: Any) -> None:
        """One decoded KVEventBatch: [ts, [event, ...], data_parallel_rank?]."""
        if self.last_seq is not None and seq != self.last_seq + 1:
            log.warning("kv events: sequence gap (%s -> %d): forgetting this replica's blocks",
                        self.last_seq, seq)
            self.cleared()
        self.last_seq = seq
        for event in batch[1]:
            kind = event.get("type")
            if kind == "BlockStored":
                self.stored(event["block_hashes"], event.get("parent_block_hash"),
                            event["token_ids"], int(event["block_size"]))
            elif kind == "BlockRemoved":
                self.removed(event["block_hashes"])
            elif kind == "AllBlocksCleared":
                self.cleared()


class KvEvents(Prefix):
    name = "kv-events"

    def __init__(self, block_size: int, guard: LoadGuard, endpoints: dict[str, str],
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(block_size, RECENT_BLOCKS, guard, clock)
        try:  # fail at start, not in a background task
            import msgspec  # noqa: F401
            import zmq  # noqa: F401
        except ImportError as exc:
            raise RuntimeError("PROXY_ROUTING=kv-events needs pyzmq and msgspec: pip install "
                               "'vllm-smart-proxy[kv-events]'") from exc
        self.endpoints = endpoints  # upstream URL -> its vLLM's ZMQ publisher
        self.reported = {url: Reported(block_size) for url in endpoints}

    def blocks_of(self, backend: Backend) -> Blocks:
        return self.reported.setdefault(backend.url, Reported(self.block_size))

    async def listen(self, url: str) -> None:
        """Subscribe to one replica's events until cancelled (pyzmq and msgspec: vLLM's own
        dependencies, imported only with this policy)."""
        import msgspec
        import zmq
        import zmq.asyncio

        decode = msgspec.msgpack.Decoder().decode
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(self.endpoints[url])
        reported = self.reported[url]
        try:
            while True:
                parts = await sock.recv_multipart()
                if len(parts) != 3:
                    continue
                try:
                    reported.apply(int.from_bytes(parts[1], "big"), decode(parts[2]))
                except (msgspec.DecodeError, KeyError, TypeError, ValueError, IndexError) as exc:
                    log.warning("kv events from %s: undecodable batch (%s)", url, exc)
        except zmq.ZMQError:
            log.exception("kv events from %s: the subscription failed; routing on what this "
                          "proxy sent there only", url)
        finally:
            sock.close(linger=0)
            ctx.term()
