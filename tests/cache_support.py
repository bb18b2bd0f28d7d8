"""Helpers for the answer-cache tests: one MiniLM per test session, request/answer builders."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from typing import Any

import orjson
from prometheus_client import CollectorRegistry

from proxy.cache import open_cache
from proxy.cache.config import CacheConfig
from proxy.cache.embedder import Embedder, Vector, default_model_path
from proxy.cache.entry import Entry
from proxy.cache.judge import Judge
from proxy.cache.lookup import SemanticCache
from proxy.types import CacheRequest, Completion


@functools.cache
def _model() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(default_model_path(), device="cpu")


def embedder(**kw: Any) -> Embedder:
    return Embedder(_model(), "sentence-transformers/all-MiniLM-L6-v2", **kw)


class HeldEmbedder(Embedder):
    """The session's MiniLM, whose worker thread waits at `gate` before each batch. `asked`
    gets each text as `embed` queues it (awaiting it: the text is pending now); `encoded` keeps
    the batches the model saw; `entered` is set when the first batch reached the model."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(_model(), "sentence-transformers/all-MiniLM-L6-v2", **kw)
        self.entered, self.gate = threading.Event(), threading.Event()
        self.asked: asyncio.Queue[str] = asyncio.Queue()
        self.encoded: list[list[str]] = []

    async def embed(self, text: str) -> Vector | None:
        self.asked.put_nowait(text)  # then queued by embed before it first waits
        return await super().embed(text)

    def encode(self, texts: list[str]) -> list[Vector | None]:
        self.encoded.append(list(texts))
        self.entered.set()
        assert self.gate.wait(30)
        return super().encode(texts)

    def seen(self) -> list[str]:
        return [t for batch in self.encoded for t in batch]


@functools.cache
def _judge() -> Judge:
    return Judge.open(0.01)


def judge(rate: float = 0.01, threshold: float | None = 3.0) -> Judge:
    """A judge over the committed model, sharing one ONNX session per test session.

    The lookup tests test the wiring, not the calibration: they fix the logit threshold
    (None: the one calibrated for `rate`)."""
    j = _judge()
    out = Judge(j.session, j.tokenizer, j.rows, rate, j.max_tokens, j.floor)
    if threshold is not None:
        out.threshold = threshold
    return out


def chat(text: str, *, tenant: str = "", max_tokens: int | None = 16, model: str = "tiny",
         no_cache: bool = False, no_store: bool = False, exact_only: bool = False,
         **extra: Any) -> CacheRequest:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}],
                            "temperature": 0, **extra}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return CacheRequest(kind="chat", body=body, tenant=tenant, no_cache=no_cache,
                        no_store=no_store, exact_only=exact_only)


def answer(text: str, *, finish: str = "stop", tokens: int = 3) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "tiny",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": finish}],
            "usage": {"prompt_tokens": 7, "completion_tokens": tokens,
                      "total_tokens": 7 + tokens}}


def completion(text: str, *, finish: str = "stop", pieces: tuple[str, ...] | None = None,
               tokens: int | None = None, streamed: bool = False) -> Completion:
    """A chat answer; `streamed`: with its stream's chunks too (vLLM's, one a piece, or the
    text as one chunk without pieces), as the cache stores a streamed miss."""
    n = tokens if tokens is not None else (len(pieces) if pieces else 3)
    body = answer(text, finish=finish, tokens=n)
    return Completion(body=body, pieces=pieces,
                      events=orjson.dumps(stream_of(body, pieces or (text,))) if streamed
                      else None)


def stream_of(body: dict[str, Any], pieces: tuple[str, ...]) -> list[dict[str, Any]]:
    """vLLM's chat chunks for this answer (without id/created): role, one a piece, usage."""
    head = {"object": "chat.completion.chunk", "model": body["model"]}
    finish = body["choices"][0]["finish_reason"]
    out: list[dict[str, Any]] = [{**head, "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
         "finish_reason": None}]}]
    for n, piece in enumerate(pieces):
        last = n == len(pieces) - 1
        choice = {"index": 0, "delta": {"content": piece}, "logprobs": None,
                  "finish_reason": finish if last else None}
        if last:
            choice["stop_reason"] = None
        out.append({**head, "choices": [choice]})
    return [*out, {**head, "choices": [], "usage": body["usage"]}]


def entry(finish: str, tokens: int, max_tokens: int | None,
          pieces: tuple[str, ...] | None = None) -> Entry:
    """A stored chat entry with this finish and usage (pieces: its text, one a token)."""
    text = "".join(pieces) if pieces else "hello world"
    return Entry(exact="x", partition="p", namespace="tiny", kind="chat", text="q",
                 max_tokens=max_tokens, answer=answer(text, finish=finish, tokens=tokens),
                 pieces=pieces)


def stream(pieces: tuple[str, ...], finish: str) -> list[dict[str, object]]:
    """vLLM's chunks for these pieces (without id/created), as the cache stores them."""
    return [{"object": "chat.completion.chunk", "model": "tiny", "choices": [
        {"index": 0, "delta": {"content": p},
         "finish_reason": finish if n == len(pieces) - 1 else None}]}
        for n, p in enumerate(pieces)] + [{"choices": [], "usage": {"completion_tokens": 3}}]


async def semantic_cache(registry: CollectorRegistry, **cfg: Any) -> SemanticCache:
    """A cache with these CacheConfig fields over the test session's embedder and judge."""
    cache = await open_cache(registry=registry, config=CacheConfig(**cfg), embedder=embedder(),
                             judge=judge())
    assert cache is not None
    return cache


def metric(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value in the registry, 0.0 when it has none."""
    value = registry.get_sample_value(name, labels)
    return value or 0.0


async def fill(cache: SemanticCache, text: str, reply: str, **kw: Any) -> None:
    """Store `reply` as the answer to the chat question `text` (a miss first)."""
    miss = await cache.lookup(chat(text, **kw))
    assert miss.status == "miss"
    await cache.store(miss.ticket, completion(reply))
