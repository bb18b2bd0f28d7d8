"""The lookup pipeline: exact tier, then semantic tier; store after completion; single flight.

lookup(req):  policy gate -> keys -> exact key in the store -> the semantic tier (semantic.py:
embed, nearest stored questions, rules, the learned judge) unless exact-only -> the hit served
for this max_tokens (serve.py).  A miss returns a ticket; identical misses (same exact key and
max_tokens) wait for the first one's answer instead of going upstream (single flight; a stream
never waits for a JSON request's answer, which does not answer it, but for another stream's;
an answer the cache cannot store sends every waiting twin upstream at once);
with several replicas on one Redis the leader first claims the flight there, and a replica that
finds it claimed waits for the stored answer (claims.py), streams and JSON apart there too
(claims.lead). Store errors bypass the cache, never fail the request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from proxy.cache.claims import Claims, NoClaims, claimed, lead
from proxy.cache.config import CacheConfig
from proxy.cache.entry import Entry, storable
from proxy.cache.flight import Ended, Flight, Flights
from proxy.cache.keys import RequestKeys, request_keys
from proxy.cache.metrics import CacheMetrics
from proxy.cache.semantic import SemanticTier
from proxy.cache.serve import answered, own_prompt
from proxy.cache.store import Store, StoreUnavailable
from proxy.effective import prompt_in_answer, uncacheable
from proxy.types import BYPASS, CacheRequest, CacheResult, Completion, TextCounter

if TYPE_CHECKING:  # the semantic tier's (numpy, faiss): imported when it is on
    from proxy.cache.embedder import Embedder, Vector
    from proxy.cache.judge import Judge


@dataclass(slots=True)
class Ticket:
    keys: RequestKeys
    kind: str
    vector: Vector | None
    flight: str | None = None
    done: bool = False
    claims: list[str] = field(default_factory=list)  # the flights it leads across replicas


class SemanticCache:
    def __init__(self, cfg: CacheConfig, store: Store, metrics: CacheMetrics,
                 embedder: Embedder | None = None, count: TextCounter | None = None,
                 judge: Judge | None = None, claims: Claims | None = None) -> None:
        self.cfg, self.db, self.metrics, self.embedder = cfg, store, metrics, embedder
        self.claims: Claims = claims if claims is not None else NoClaims()
        self.judge = judge
        self.count = count
        # the semantic tier (semantic.py, its index with it): with an embedder only
        self.semantic = SemanticTier(cfg, store, metrics, embedder, judge, count) \
            if embedder is not None else None
        self._identity = embedder.identity if embedder is not None else "none"
        self._flights = Flights()

    async def lookup(self, req: CacheRequest) -> CacheResult:
        start = time.perf_counter()
        result = await self._lookup(req)
        self.metrics.lookup_seconds.labels(result.status).observe(time.perf_counter() - start)
        self.metrics.lookups.labels(result.status, result.tier or "").inc()
        return result

    async def _lookup(self, req: CacheRequest) -> CacheResult:
        if self.cfg.mode == "off" or req.no_store or uncacheable(req.kind, req.body) is not None:
            return BYPASS
        keys = request_keys(req.kind, req.body, "" if self.cfg.shared else req.tenant,
                            self._identity)
        if not req.searchable or prompt_in_answer(req.body):
            # never answered by meaning: no question to embed, search with or store a vector for
            keys = replace(keys, text=None)
        if req.no_cache:
            return CacheResult(status="miss", ticket=Ticket(keys, req.kind, None))
        twins = _twins(keys)
        streams = req.body.get("stream") is True
        hedged: list[bool] = []
        hook: Callable[[], None] | None = None
        if req.hedge is not None:
            start = req.hedge

            def hook() -> None:
                hedged.append(True)
                start()

        try:
            for attempt in range(3):
                # a JSON leader's answer does not answer a stream (serve.py: answered): a
                # stream twin of one follows, or leads, the streams' own flight instead of
                # waiting for an answer that is then its miss (found by a review)
                # (and a stream that began beside a JSON leader stays there after that one
                # ended: its twins follow it, not wait for it as for another replica's claim)
                flight = twins + ":stream" if streams and (
                    twins in self._flights.unstreamed
                    or twins + ":stream" in self._flights.waiting) else twins
                waiting = self._flights.waiting.get(flight)
                if waiting is None:
                    # lead: registered before the search, so that twins arriving while it
                    # embeds and judges wait for it (and do not hedge) rather than each going
                    # upstream; only a first-time leader hedges
                    led = await self._lead(req, keys, flight, streams,
                                           hook if attempt == 0 else None, hedged)
                    if led is not None:
                        return led
                    continue  # another replica led it and has settled: look again
                live = self._flights.live.get(flight)
                if live is not None and streams:
                    try:
                        async with asyncio.timeout(self.cfg.wait_s):
                            joined = await live.started()
                    except TimeoutError:
                        self.metrics.single_flight_fallbacks.labels("timeout").inc()
                        break
                    if joined:
                        live.followers += 1
                        self.metrics.single_flight_streams.inc()
                        return CacheResult("hit", "flight", live=live)
                    if live.full and live.state == "live":  # too much to replay: go upstream
                        self.metrics.single_flight_fallbacks.labels("overflow").inc()
                        return CacheResult(status="miss", ticket=Ticket(keys, req.kind, None))
                    if live.state == "failed":
                        self.metrics.single_flight_fallbacks.labels("leader_failed").inc()
                    # not yet ended when its stream was stopped (nobody read it): failed
                    ended: Ended = waiting.result() if waiting.done() else "failed"
                else:
                    self.metrics.single_flight_waits.inc()
                    try:
                        ended = await asyncio.wait_for(asyncio.shield(waiting), self.cfg.wait_s)
                    except TimeoutError:
                        break
                if ended != "failed":
                    # the leader's answer came: every twin looks again at once, not one at a
                    # time as each re-look's leader (each wait one of their tries: with the
                    # store in Redis the fourth twin went upstream although the answer was
                    # stored; found by a review)
                    hit, _ = await self._find(keys, req, None, streams)
                    if hit is not None:
                        return hit
                if ended == "unstored":
                    # nothing stored (a tool call, an error): a twin leading a new round would
                    # get the same, so all go now, not one round after another (found by a
                    # probe: 5 twins of a 1 s tool call took 4 s)
                    self.metrics.single_flight_fallbacks.labels("unstored").inc()
                    break
        except StoreUnavailable:
            self.metrics.backend_errors.labels("lookup").inc()
            return BYPASS
        return CacheResult(status="miss", ticket=Ticket(keys, req.kind, None))

    async def _lead(self, req: CacheRequest, keys: RequestKeys, flight: str, streams: bool,
                    hook: Callable[[], None] | None, hedged: list[bool]) -> CacheResult | None:
        """Search as this flight's leader: a hit (twins then look again and find it), a miss
        whose ticket leads the flight upstream, or None after another replica led it."""
        self._flights.waiting[flight] = asyncio.get_running_loop().create_future()
        if streams and self.cfg.flight_max_bytes > 0:
            self._flights.live[flight] = Flight(self.cfg.flight_max_bytes)
        if not streams:
            self._flights.unstreamed.add(flight)
        own = Ticket(keys, req.kind, None, flight)
        try:  # the client may leave (cancelled): the flight must not stay registered
            hit, own.vector = await self._find(keys, req, hook, streams)
            leads = hit is None and await lead(self.claims, _twins(keys), streams, own.claims)
        except BaseException:
            self._release(own, "failed")
            await self._unclaim(own)  # cancelled between a stream's two claims: the first
            raise
        if hit is not None:
            self._release(own, "answered")
            return hit
        if leads:
            return CacheResult(status="miss", ticket=own)
        if hedged:  # this one's upstream call is under way already: keep it
            self._release(own, "answered")
            return CacheResult(status="miss", ticket=Ticket(keys, req.kind, own.vector))
        # another replica leads it: local twins keep waiting for this one, which waits for
        # that replica's answer (woken at once, they each claimed in turn, one try each)
        self.metrics.single_flight_remote_waits.inc()
        try:
            await self.claims.settled(claimed(_twins(keys), streams), self.cfg.wait_s)
        finally:
            self._release(own, "answered")
        return None

    async def _find(self, keys: RequestKeys, req: CacheRequest,
                    hedge: Callable[[], None] | None = None, streams: bool = False
                    ) -> tuple[CacheResult | None, Vector | None]:
        entry = await self.db.get_exact(keys.exact)
        if entry is not None and entry.exact == keys.exact and entry.partition == keys.partition:
            hit = answered(entry, keys.max_tokens, streams, self.count)
            if hit is not None:
                return CacheResult("hit", "exact", 1.0, hit[0], events=hit[1]), None
        if self.cfg.mode != "semantic" or self.semantic is None or req.exact_only:
            return None, None
        found, vector = await self.semantic.find(keys, hedge, streams)
        if found is not None and found.answer is not None and req.prompt_tokens is not None:
            answer, events = own_prompt(found.answer, found.events, req.prompt_tokens)
            found = replace(found, answer=answer, events=events)
        return found, vector

    async def store(self, ticket: object, completion: Completion) -> None:
        if not isinstance(ticket, Ticket) or ticket.done:
            return
        ended: Ended = "unstored"
        try:
            if await self._store(ticket, completion):
                ended = "answered"
        except StoreUnavailable:
            self.metrics.backend_errors.labels("store").inc()
        finally:
            self._release(ticket, ended)
            await self._unclaim(ticket)

    async def _store(self, ticket: Ticket, completion: Completion) -> bool:
        """True when the answer is in the store (this one, or the older one kept)."""
        if not storable(completion.body):
            self.metrics.stores.labels("refused").inc()
            return False
        keys, vector = ticket.keys, ticket.vector
        tier = self.semantic
        if vector is None and self.cfg.mode == "semantic" and tier is not None \
                and keys.text is not None and not tier.busy():  # busy: exact-only entry
            vector = await tier.embedder.embed(keys.text)
        entry = Entry(exact=keys.exact, partition=keys.partition, namespace=keys.namespace,
                      kind=ticket.kind, text=keys.text if vector is not None else None,
                      max_tokens=keys.max_tokens, answer=completion.body,
                      pieces=completion.pieces if keys.cuttable else None,
                      events=completion.events,
                      vector=vector.astype("float32").tobytes() if vector is not None else None)
        stored = await self.db.put(entry)
        if self.semantic is None:
            self.db.take_removed()  # no index to prune (exact mode)
        self.metrics.stores.labels("stored" if stored is not None else "kept_old").inc()
        if stored is not None and vector is not None and self.semantic is not None:
            await asyncio.to_thread(self.semantic.index.add, stored.partition, stored.id, vector)
        self.metrics.entries.set(await self.db.count())
        return True

    async def abandon(self, ticket: object) -> None:
        if isinstance(ticket, Ticket) and not ticket.done:
            self._release(ticket, "failed")
            await self._unclaim(ticket)

    async def _unclaim(self, ticket: Ticket) -> None:
        while ticket.claims:
            await self.claims.release(ticket.claims.pop())

    def share(self, ticket: object, events: list[bytes]) -> Flight | None:
        live = self._flights.live.get(ticket.flight or "") if isinstance(ticket, Ticket) \
            else None
        if live is not None:
            live.attach(events)
        return live

    def _release(self, ticket: Ticket, ended: Ended) -> None:
        ticket.done = True
        broken = self._flights.end(ticket.flight, ended) if ticket.flight is not None else 0
        if broken:
            self.metrics.single_flight_broken.inc(broken)

    async def stats(self) -> dict[str, Any]:
        return {"mode": self.cfg.mode, "threshold": self.cfg.threshold,
                "judge_threshold": self.judge.threshold if self.judge is not None else None,
                "judge_drift": self.judge.drift if self.judge is not None else None,
                "judge_weights": self.judge.weights if self.judge is not None else None,
                "max_false_hit_rate": self.cfg.max_false_hit_rate,
                "store": "redis" if self.cfg.redis_url else "memory",
                "entries": await self.db.count(),
                "indexed": len(self.semantic.index) if self.semantic is not None else 0,
                "in_flight": len(self._flights.waiting),
                "embedder": self._identity}

    async def flush(self, namespace: str | None = None) -> int:
        removed = await self.db.flush(namespace)
        if namespace is None and self.semantic is not None:
            await asyncio.to_thread(self.semantic.index.clear)
            self.db.take_removed()
        self.metrics.entries.set(await self.db.count())
        return int(removed)

    async def aclose(self) -> None:
        self._flights.close()
        await self.claims.aclose()
        if self.embedder is not None:
            await self.embedder.aclose()
        if self.judge is not None:
            self.judge.close()
        await self.db.aclose()


def _twins(keys: RequestKeys) -> str:
    """Identical requests' flight: the same exact key and max_tokens."""
    return f"{keys.exact}:{keys.max_tokens}"
