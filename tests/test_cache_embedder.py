from __future__ import annotations

import asyncio
import contextlib

import numpy as np

from tests.cache_support import HeldEmbedder, embedder


async def test_concurrent_embeds_are_batched_and_match_single_encodes() -> None:
    emb = embedder(max_batch=32, max_wait=0.05)
    texts = [f"How do I sort list number {i}?" for i in range(20)]
    try:
        vectors = await asyncio.gather(*(emb.embed(t) for t in texts))
        assert emb.calls == 20 and emb.batches < 20
        single = emb.encode([texts[3]])[0]
        assert single is not None and vectors[3] is not None
        assert np.allclose(vectors[3], single, atol=1e-5)
        assert abs(float(np.linalg.norm(single)) - 1.0) < 1e-4
    finally:
        await emb.aclose()


async def test_text_longer_than_the_window_skips() -> None:
    emb = embedder()
    try:
        assert await emb.embed("word " * (emb.window + 10)) is None
        assert await emb.embed("short") is not None
        assert emb.identity.endswith(f":{emb.dim}:{emb.window}") and emb.dim == 384
    finally:
        await emb.aclose()


async def test_paraphrases_are_close_and_unrelated_far() -> None:
    emb = embedder()
    try:
        a, b, c = await asyncio.gather(emb.embed("What is the capital of France?"),
                                       emb.embed("What's the capital city of France?"),
                                       emb.embed("How do I bake sourdough bread?"))
        assert a is not None and b is not None and c is not None
        assert float(a @ b) > 0.8 > float(a @ c)
    finally:
        await emb.aclose()


async def test_a_gone_callers_text_is_dropped_not_encoded_and_pending_until_then() -> None:
    emb = HeldEmbedder(max_batch=2)
    try:
        calls = {t: asyncio.create_task(emb.embed(t)) for t in ("a", "b", "gone", "c", "d")}
        assert await asyncio.to_thread(emb.entered.wait, 30)  # all five queued before it ran
        assert emb.encoded == [["a", "b"]] and emb.pending == 5
        calls["gone"].cancel()  # its client left
        with contextlib.suppress(asyncio.CancelledError):
            await calls["gone"]
        assert emb.pending == 5  # still queued: it counts until the worker drops it
        emb.gate.set()
        vectors = await asyncio.gather(*(calls[t] for t in ("a", "b", "c", "d")))
        assert all(v is not None for v in vectors)
        # the gone text is neither encoded nor takes a place in a batch
        assert emb.encoded == [["a", "b"], ["c", "d"]]
        assert (emb.dropped, emb.pending, emb.batches) == (1, 0, 2)
    finally:
        emb.gate.set()
        await emb.aclose()


async def test_pending_counts_queued_and_encoding_texts() -> None:
    emb = HeldEmbedder(max_batch=1)
    try:
        assert emb.pending == 0
        first = asyncio.create_task(emb.embed("first"))
        assert await emb.asked.get() == "first" and emb.pending == 1
        assert await asyncio.to_thread(emb.entered.wait, 30)
        second = asyncio.create_task(emb.embed("second"))
        assert await emb.asked.get() == "second" and emb.pending == 2  # one encoding, one queued
        emb.gate.set()
        assert await first is not None and await second is not None
        assert emb.pending == 0
    finally:
        emb.gate.set()
        await emb.aclose()
