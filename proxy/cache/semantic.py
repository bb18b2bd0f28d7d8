"""The semantic tier: the stored question closest in meaning whose answer serves this request.

find(keys):  embed the question (micro-batched, embedder.py; with the embedder busy, a miss
instead: `busy`) -> catch up the index with other writers (the store's changes) -> top-k ids in
the partition (index.py) -> entries from the store -> cosine floor and hand-kept rules
(verify.py) -> the learned judge scores the survivors in one batch (judge.py) -> the best
accepted one is served for this max_tokens (serve.py). The exact tier, single flight and
storing are lookup.py's.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.cache.config import CacheConfig
from proxy.cache.entry import Entry
from proxy.cache.keys import RequestKeys
from proxy.cache.metrics import CacheMetrics
from proxy.cache.serve import answered
from proxy.cache.store import Store
from proxy.cache.verify import check, same_question
from proxy.types import CacheResult, TextCounter

if TYPE_CHECKING:  # numpy and faiss: imported when the tier is on
    from proxy.cache.embedder import Embedder, Vector
    from proxy.cache.judge import Judge


class SemanticTier:
    """One cache's search by meaning: its vector index over the store's entries, searched
    with the cache's embedder and judge (the cache stores into the index, flushes it, and
    closes the embedder and the judge)."""

    def __init__(self, cfg: CacheConfig, store: Store, metrics: CacheMetrics,
                 embedder: Embedder, judge: Judge | None = None,
                 count: TextCounter | None = None) -> None:
        from proxy.cache.index import VectorIndex

        self.cfg, self.db, self.metrics, self.embedder = cfg, store, metrics, embedder
        self.judge, self.count = judge, count
        self.index = VectorIndex(embedder.dim)

    async def find(self, keys: RequestKeys, hedge: Callable[[], None] | None = None,
                   streams: bool = False) -> tuple[CacheResult | None, Vector | None]:
        """A semantic hit, or None; and the question's vector (None: not embedded)."""
        if keys.text is None:
            return None, None
        if self.busy():  # shed: a miss, not a queue
            self.metrics.rejections.labels("embed_busy").inc()
            return None, None
        if hedge is not None:
            hedge()
        started = time.perf_counter()
        vector = await self.embedder.embed(keys.text)
        self.metrics.embed_seconds.observe(time.perf_counter() - started)
        if vector is None:
            return None, None
        candidates = await self._search(keys.partition, vector)
        entries = await self.db.get_many([i for i, _ in candidates])
        best: float | None = None
        pending: list[tuple[float, Entry]] = []
        for (entry_id, sim), cand in zip(candidates, entries, strict=True):
            if cand is None or cand.partition != keys.partition or cand.text is None:
                if cand is None:
                    self.db.forget(entry_id)
                continue
            best = sim if best is None else max(best, sim)
            reason = "below_threshold" if sim < self.cfg.threshold else check(
                keys.text, cand.text).reason
            if reason is not None:
                self.metrics.rejections.labels(reason).inc()
            else:
                pending.append((sim, cand))
        for sim, cand in await self._judged(keys.text, pending):
            hit = answered(cand, keys.max_tokens, streams, self.count)
            if hit is not None:
                self.metrics.similarity.labels("hit").observe(sim)
                return CacheResult("hit", "semantic", round(sim, 4), hit[0],
                                   events=hit[1]), vector
        if best is not None:
            self.metrics.similarity.labels("miss").observe(best)
        return None, vector

    def busy(self) -> bool:
        """The embedder holds as many texts as PROXY_CACHE_EMBED_MAX_PENDING allows: a lookup
        skips this tier (a miss unless the exact tier hit) and a store keeps its entry for
        the exact tier only (lookup.py), rather than queue behind them."""
        return 0 < self.cfg.embed_max_pending <= self.embedder.pending

    async def _judged(self, text: str, pending: list[tuple[float, Entry]]
                      ) -> list[tuple[float, Entry]]:
        """The candidates the judge accepts, most confident first (the same question, written
        differently only in spacing, end punctuation or an opening capital, needs none:
        verify.same_question)."""
        same: list[tuple[float, Entry]] = []
        others: list[tuple[float, Entry]] = []
        for sim, c in pending:  # the rule's regexes once per candidate
            (same if same_question(text, c.text or "") else others).append((sim, c))
        if not others or self.judge is None:
            return same
        if math.isinf(self.judge.threshold):  # the bound admits no threshold: nothing passes
            self.metrics.rejections.labels("judge").inc(len(others))
            return same
        if 0 < self.cfg.judge_max_pending <= self.judge.pending:  # shed: a miss, not a queue
            self.metrics.rejections.labels("judge_busy").inc(len(others))
            return same
        started = time.perf_counter()
        logits = await self.judge.score([(text, c.text or "") for _, c in others])
        self.metrics.judge_seconds.observe(time.perf_counter() - started)
        accepted = []
        for logit, (sim, cand) in sorted(zip(logits, others, strict=True), key=lambda x: -x[0]):
            ok = self.judge.accepts(logit)
            self.metrics.judge_verdicts.labels("accept" if ok else "reject").inc()
            if ok:
                accepted.append((sim, cand))
            else:
                self.metrics.rejections.labels("judge").inc()
        return same + accepted

    async def _search(self, partition: str, vector: Vector) -> list[tuple[int, float]]:
        index = self.index
        assert index is not None
        added = await self.db.changes()
        removed = self.db.take_removed()
        reset = self.db.take_reset()

        def work() -> list[tuple[int, float]]:
            if reset:
                index.clear()
            for entry_id in removed:
                index.remove(entry_id)
            for entry in added:
                # another size: another embedder's entry under the prefix (a rolling change of
                # PROXY_CACHE_EMBED_MODEL) or a torn record; index.add raised (a 500; a review)
                if entry.vector is not None and len(entry.vector) == 4 * index.dim:
                    index.add(entry.partition, entry.id, _vec(entry.vector))
            return index.search(partition, vector, self.cfg.top_k)

        return await asyncio.to_thread(work)


def _vec(raw: bytes) -> Vector:
    import numpy as np

    return np.frombuffer(raw, dtype=np.float32)
