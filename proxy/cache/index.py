"""FAISS over entry ids only, one index per partition (the store holds the entries).

A partition starts as an exact inner-product index (IndexFlatIP: vectors are normalized, so
inner product is cosine). Past `hnsw_from` vectors it is rebuilt as HNSW. HNSW cannot remove,
so removals are tombstones filtered out of results, and the index is rebuilt when they pile up.
All methods are blocking: the caller runs them in a thread.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import faiss
import numpy as np

if TYPE_CHECKING:
    from proxy.cache.embedder import Vector

# HNSW search breadth. faiss's default (16) found the true nearest neighbour for only 73% of
# queries at 100k clustered vectors and 31% at 1M (bench/cache_cost.py): a lost hit each time.
EF_SEARCH = 128
EF_CONSTRUCTION = 64


class _Partition:
    def __init__(self, dim: int, hnsw_from: int) -> None:
        self.dim, self.hnsw_from = dim, hnsw_from
        self.vectors: dict[int, Vector] = {}
        self.dead = 0
        self.index: faiss.Index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self.hnsw = False

    def rebuild(self) -> None:
        self.hnsw = len(self.vectors) >= self.hnsw_from
        base: faiss.Index
        if self.hnsw:
            base = faiss.IndexHNSWFlat(self.dim, 32, faiss.METRIC_INNER_PRODUCT)
            base.hnsw.efConstruction = EF_CONSTRUCTION
            base.hnsw.efSearch = EF_SEARCH
        else:
            base = faiss.IndexFlatIP(self.dim)
        self.index = faiss.IndexIDMap2(base) if not self.hnsw else faiss.IndexIDMap(base)
        self.dead = 0
        if self.vectors:
            ids = np.fromiter(self.vectors, dtype=np.int64, count=len(self.vectors))
            self.index.add_with_ids(np.stack(list(self.vectors.values())), ids)


class VectorIndex:
    def __init__(self, dim: int, hnsw_from: int = 20_000) -> None:
        self.dim = dim
        self._hnsw_from = hnsw_from
        self._parts: dict[str, _Partition] = {}
        self._where: dict[int, str] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, entry_id: int) -> bool:
        return entry_id in self._where

    def add(self, partition: str, entry_id: int, vector: Vector) -> None:
        with self._lock:
            if entry_id in self._where:
                return
            part = self._parts.get(partition)
            if part is None:
                part = self._parts[partition] = _Partition(self.dim, self._hnsw_from)
            vec = np.asarray(vector, dtype=np.float32).reshape(1, self.dim)
            part.vectors[entry_id] = vec[0]
            self._where[entry_id] = partition
            if not part.hnsw and len(part.vectors) >= part.hnsw_from:
                part.rebuild()
            else:
                part.index.add_with_ids(vec, np.array([entry_id], dtype=np.int64))

    def remove(self, entry_id: int) -> None:
        with self._lock:
            partition = self._where.pop(entry_id, None)
            if partition is None:
                return
            part = self._parts[partition]
            del part.vectors[entry_id]
            if not part.vectors:
                del self._parts[partition]
            elif part.hnsw:
                part.dead += 1
                if part.dead > len(part.vectors):
                    part.rebuild()
            else:
                part.index.remove_ids(np.array([entry_id], dtype=np.int64))  # type: ignore[arg-type]

    def search(self, partition: str, vector: Vector, k: int) -> list[tuple[int, float]]:
        """The k nearest live ids in the partition with their cosine, best first."""
        with self._lock:
            part = self._parts.get(partition)
            if part is None:
                return []
            want = min(k + part.dead, part.index.ntotal)
            scores, ids = part.index.search(
                np.asarray(vector, dtype=np.float32).reshape(1, self.dim), want)
            hits = [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True)
                    if i >= 0 and int(i) in part.vectors]
            return hits[:k]

    def clear(self) -> None:
        with self._lock:
            self._parts.clear()
            self._where.clear()
