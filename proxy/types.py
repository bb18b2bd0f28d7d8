"""The seam between the proxy core and the answer cache (proxy/cache/ implements AnswerCache)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Kind = Literal["chat", "completions"]
TextCounter = Callable[[str], int]  # text -> tokens, synchronous (the served model's tokenizer)
CacheStatus = Literal["hit", "miss", "bypass"]
CacheTier = Literal["exact", "semantic", "flight"]


@dataclass(frozen=True, slots=True)
class CacheRequest:
    kind: Kind
    body: dict[str, Any]  # the final upstream JSON body, after clipping and policy
    tenant: str  # the API key's identity ("" when the proxy is open)
    no_cache: bool  # request Cache-Control: no-cache (do not answer from the cache)
    no_store: bool  # request Cache-Control: no-store (do not store the answer)
    # Called (at most once) when the exact tier missed and the semantic search begins: the
    # handler starts the upstream call then, so a miss does not wait for the embedding.
    hedge: Callable[[], None] | None = None
    exact_only: bool = False  # skip the semantic tier (X-Cache-Semantic: off, or a setting)
    # whether a request of this kind may ever be answered by meaning (not so when
    # PROXY_CACHE_EXACT_ONLY names its route): if not, its answer is stored unembedded
    searchable: bool = True
    # the prompt's tokens as the proxy counted them (one prompt): a semantic hit's usage
    prompt_tokens: int | None = None


class Shared(Protocol):
    """The leader's side of a streaming single flight (cache/flight.py)."""
    @property
    def followers(self) -> int: ...

    def wake(self) -> None: ...  # after each new event

    def when_empty(self, fn: Callable[[], object]) -> None: ...  # the last follower left

    def close(self) -> None: ...  # the leader stops the stream: no one new may join


class LiveStream(Protocol):
    """A miss's upstream stream in flight that identical streaming requests follow
    (cache/flight.py): each event's JSON as it arrives, and how it ended."""
    @property
    def state(self) -> str: ...  # live | done | failed

    def follow(self) -> AsyncIterator[bytes]: ...

    def leave(self) -> None: ...  # this follower's response ended


# A stored stream's chunks as one JSON array, kept as bytes: thousands of answers of hundreds
# of parsed chunks each would be millions of objects for Python's cyclic GC to walk (a full
# collection took 0.5 s with 1,300 answers of 384 chunks: a stall of every stream in flight).
Events = bytes
# A stored stream's chunks parsed, for one replay (cache/entry.py: chunks): a hit's, short-lived.
Chunks = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class CacheResult:
    status: CacheStatus
    tier: CacheTier | None = None
    similarity: float | None = None
    answer: dict[str, Any] | None = None  # full non-streaming OpenAI body, on a hit
    ticket: object | None = None  # opaque, handed back to store()/abandon() on a miss
    # on a stream's hit (always from a streamed answer): vLLM's own chunks (without
    # id/created), parsed and checked by the lookup, replayed as they are
    events: Chunks | None = None
    live: LiveStream | None = None  # tier "flight": the identical stream in flight to follow


@dataclass(frozen=True, slots=True)
class Completion:
    body: dict[str, Any]  # full non-streaming OpenAI body (accumulated when streamed)
    pieces: tuple[str, ...] | None = None  # each streamed content delta, in order
    events: Events | None = None  # the stream's chunks, without id/created


class AnswerCache(Protocol):
    async def lookup(self, req: CacheRequest) -> CacheResult: ...

    async def store(self, ticket: object, completion: Completion) -> None: ...

    async def abandon(self, ticket: object) -> None: ...

    def share(self, ticket: object, events: list[bytes]) -> Shared | None:
        """A streaming miss's accumulating events, for identical requests to follow live
        (None: nobody can follow this one)."""

    async def aclose(self) -> None: ...


BYPASS = CacheResult(status="bypass")
