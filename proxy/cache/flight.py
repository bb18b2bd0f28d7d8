"""Streaming single flight: identical streaming misses share the one upstream stream in flight.

The leader's miss goes upstream; its relay keeps every event's JSON raw for the store anyway
(sse.Accumulator.add_raw). A Flight shares that list: a follower (the same exact key and
max_tokens, so the same partition and the same greedy answer) that asks while the leader's
stream is live gets every event so far, then each as it arrives — re-framed with its own id and
created as a cache replay is (sse.reframe) — instead of waiting for the whole answer to be
stored. Memory: nothing beyond the leader's own accumulation, which the cache keeps anyway.

A follower joins only after the leader's first event (before that, it waits as a non-streaming
follower does, and if the leader fails it goes upstream itself). The leader reads the upstream
in a task of its own (relay.Pump): if the leader's client leaves while others follow, that
read goes on for them and the answer is still stored (a handover, counted in
proxy_flight_handovers_total). If the shared stream fails (the upstream broke), every
follower gets an OpenAI-shaped error event, never a cut answer presented as complete.

Bound: a flight takes no new follower once the leader's events pass max_bytes (a late follower
would replay all of them first); such a follower goes upstream itself (a fallback). Followers
already on it go on: they hold only an index into the list the leader keeps anyway.

Flights: one replica's flights in progress (lookup.py's single flight, JSON and streams), and
how each leader ended, which its waiting twins act on (Ended).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Literal

State = Literal["live", "done", "failed"]
# how a flight's leader ended: with an answer found or stored (its twins look again), with an
# answer the cache could not store (they go upstream at once: a twin leading another round
# would get no more), or failed or left (one of them leads next)
Ended = Literal["answered", "unstored", "failed"]


class Flight:
    def __init__(self, max_bytes: int = 1 << 20) -> None:
        self.events: list[bytes] = []  # the leader's Accumulator.raw: one JSON payload an event
        self.state: State = "live"
        self.followers = 0  # counted when they join (lookup), out when they leave (leave)
        self.max_bytes = max_bytes
        self.size = 0  # bytes of the events counted so far
        self._counted = 0
        self._changed = asyncio.Event()
        self._on_empty: Callable[[], object] | None = None

    def leave(self) -> None:
        """A follower's response ended (finished, failed or its client gone). The last one out
        calls what the leader left (when_empty): with no client left, nobody waits for the
        upstream stream, so it is stopped rather than run to max_tokens (found by a review)."""
        self.followers = max(0, self.followers - 1)
        if self.followers == 0 and self._on_empty is not None:
            self._on_empty()

    def when_empty(self, fn: Callable[[], object]) -> None:
        self._on_empty = fn

    def attach(self, events: list[bytes]) -> None:
        """The leader's accumulation list (appended to as its relay passes events on)."""
        self.events, self.size, self._counted = events, 0, 0
        self.wake()

    @property
    def full(self) -> bool:
        return self.size > self.max_bytes

    def wake(self) -> None:
        events = self.events
        while self._counted < len(events):
            self.size += len(events[self._counted])
            self._counted += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def close(self) -> None:
        """The leader stops its upstream stream (nobody is left to read for it): no one may
        join now. One that joined in the stop's window got the stop as an error, 'lost its
        upstream stream', where nothing upstream had failed; it goes upstream itself instead."""
        self.finish(False)

    def finish(self, ok: bool) -> None:
        if self.state == "live":
            self.state = "done" if ok else "failed"
            self.wake()

    async def started(self) -> bool:
        """Wait until the leader's first event or its end: True when one can follow."""
        while self.state == "live" and not self.events:
            await self._changed.wait()
        return bool(self.events) and self.state != "failed" and not self.full

    async def follow(self) -> AsyncIterator[bytes]:
        """Every event's JSON so far, then each as it comes, until the leader's stream ends."""
        i = 0
        while True:
            events = self.events  # the list object is kept even after the store folds it
            while i < len(events):
                yield events[i]
                i += 1
            if self.state != "live":
                return
            await self._changed.wait()


@dataclass(slots=True)
class Flights:
    waiting: dict[str, asyncio.Future[Ended]] = field(default_factory=dict)  # each leader's end
    live: dict[str, Flight] = field(default_factory=dict)  # streaming leaders
    unstreamed: set[str] = field(default_factory=set)  # flights whose leader is not a stream

    def end(self, flight: str, ended: Ended) -> int:
        """The flight's leader ended: its twins wake. Returns the live followers its failure
        broke (they get an error event)."""
        self.unstreamed.discard(flight)
        fut = self.waiting.pop(flight, None)
        if fut is not None and not fut.done():
            fut.set_result(ended)
        live = self.live.pop(flight, None)
        if live is None:
            return 0
        live.finish(ended != "failed")
        return live.followers if ended == "failed" else 0

    def close(self) -> None:
        """At shutdown: every flight still in progress fails."""
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_result("failed")
        for live in self.live.values():
            live.finish(False)
