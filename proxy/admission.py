"""A bound on in-flight upstream requests, with a bounded wait: never an unbounded queue.

A request weighs as many slots as it carries prompts (a batch of 8 prompts is 8 sequences for
vLLM). With API keys, no key holds more than its share of the slots (PROXY_TENANT_SHARE): a key
over its share waits while other keys' requests go past it in the queue; and no key fills more
than the same share of the queue (one key's queued requests refused every other key's at once,
found by a review). A waiter its key's share allows but the total does not (a batch needing
more slots than are free) reserves the slots that free up: none behind it, nor a request
arriving meanwhile, takes one before it is served (found by a review: a batch of 2 waited until
its timeout while two other keys' singles took each slot freed).

CountGate bounds what a request asks of vLLM before it reaches admission: counting its tokens
with vLLM's /tokenize when no tokenizer is loaded here (tokens.RemoteCounter). Its turns are
shared as admission's slots are: no key holds more than its share of them (found by a review:
one key's flood took every turn, and other keys' requests, cache hits too, waited behind it)."""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from proxy.errors import TooManyRequests
from proxy.metrics import Metrics

# The API key of the request the running task serves ("" without keys), set where the key is
# known (handler.py, passthrough.py): a count at vLLM (tokens.RemoteCounter) knows no request,
# and CountGate holds its turns per key.
request_key: ContextVar[str] = ContextVar("request_key", default="")


@dataclass(slots=True)
class _Waiter:
    tenant: str
    weight: int
    granted: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class _KeyedSlots:
    """`limit` slots, at most `cap` of them a key's; those who wait, at most `timeout` s, are
    woken in arrival order (Admission's slots and CountGate's turns)."""

    def __init__(self, limit: int, cap: int, timeout: float) -> None:
        self.limit = limit
        self.cap = cap
        self.timeout = timeout
        self.inflight = 0
        self.held: dict[str, int] = {}
        self._queue: deque[_Waiter] = deque()

    def _within_share(self, tenant: str, weight: int) -> bool:
        return self.held.get(tenant, 0) + weight <= self.cap

    def _fits_now(self, tenant: str, weight: int) -> bool:
        """Whether a request takes its slots without queueing. A queued waiter is one over its
        key's share, whom others pass, or one the total holds back, who has every free slot
        reserved (see _reserved)."""
        return (self.inflight + weight <= self.limit and self._within_share(tenant, weight)
                and not self._reserved())

    def _reserved(self) -> bool:
        """Whether a waiter its key's share allows is queued. _dispatch would have woken it if
        the free slots sufficed: it needs all of them and the next to free, none is spare."""
        return any(not w.granted.done() and self._within_share(w.tenant, w.weight)
                   for w in self._queue)

    def _take(self, tenant: str, weight: int) -> None:
        self.inflight += weight
        self.held[tenant] = self.held.get(tenant, 0) + weight

    def _give(self, tenant: str, weight: int) -> None:
        self.inflight -= weight
        left = self.held[tenant] - weight
        if left:
            self.held[tenant] = left
        else:
            del self.held[tenant]
        self._dispatch()

    async def _wait(self, tenant: str, weight: int) -> None:
        """Queue for the slots, at most `timeout` s (then TimeoutError, holding none)."""
        waiter = _Waiter(tenant, weight)
        self._queue.append(waiter)
        try:
            async with asyncio.timeout(self.timeout):
                await waiter.granted
        except BaseException as exc:
            granted = waiter.granted.done() and not waiter.granted.cancelled()
            if not granted:
                self._queue.remove(waiter)
                self._dispatch()  # the slots it reserved go to those it held back, now
            elif isinstance(exc, TimeoutError):
                return  # granted as the wait ran out: keep it
            else:
                self._give(tenant, weight)
            raise

    def _dispatch(self) -> None:
        """Wake, in arrival order, the waiters that now fit: past one over its key's share, never
        past one its share allows but the total holds back (the free slots are its)."""
        for waiter in list(self._queue):
            if waiter.granted.done():  # cancelled; its task removes it when it next runs
                continue
            if not self._within_share(waiter.tenant, waiter.weight):
                continue
            if self.inflight + waiter.weight > self.limit:
                return  # none behind it takes a slot: the first such waiter is served first
            self._queue.remove(waiter)
            self._take(waiter.tenant, waiter.weight)
            waiter.granted.set_result(None)


class Admission(_KeyedSlots):
    def __init__(self, limit: int, max_waiting: int, timeout: float, metrics: Metrics,
                 tenant_share: float = 1.0) -> None:
        super().__init__(limit, max(1, math.floor(limit * tenant_share)),  # a tenant's slots
                         timeout)
        self.max_waiting = max_waiting
        self.metrics = metrics
        self.tenant_share = tenant_share  # CountGate's turns are shared so too
        self.wait_cap = max(1, math.floor(max_waiting * tenant_share))  # and queue places
        self.queued: dict[str, int] = {}
        self.retry_after = str(max(1, math.ceil(timeout)))

    def refuse(self, why: str) -> TooManyRequests:
        self.metrics.rejected.inc()
        return TooManyRequests(f"the proxy is at capacity ({self.inflight} of {self.limit} slots "
                               f"in use, {why}); retry later",
                               headers={"Retry-After": self.retry_after})

    def weight(self, n: int) -> int:
        """The slots a request of n prompts takes: at least 1, at most one tenant's share."""
        return max(1, min(n, self.cap))

    def _take(self, tenant: str, weight: int) -> None:
        super()._take(tenant, weight)
        self.metrics.inflight.inc(weight)

    async def acquire(self, tenant: str = "", weight: int = 1) -> None:
        weight = self.weight(weight)
        if self._fits_now(tenant, weight):
            self._take(tenant, weight)
            return
        if len(self._queue) >= self.max_waiting:
            raise self.refuse(f"{len(self._queue)} waiting")
        mine = self.queued.get(tenant, 0)
        if mine >= self.wait_cap:
            raise self.refuse(f"this key has {mine} requests waiting, its share of the queue")
        self.queued[tenant] = mine + 1
        self.metrics.waiting.inc()
        try:
            await self._wait(tenant, weight)
        except TimeoutError:
            raise self.refuse(f"no slot within {self.timeout:g} s") from None
        finally:
            self.metrics.waiting.dec()
            left = self.queued[tenant] - 1
            if left:
                self.queued[tenant] = left
            else:
                del self.queued[tenant]

    def _give(self, tenant: str, weight: int) -> None:
        self.metrics.inflight.dec(weight)
        super()._give(tenant, weight)

    def release(self, tenant: str = "", weight: int = 1) -> None:
        self._give(tenant, self.weight(weight))

    @asynccontextmanager
    async def slot(self, tenant: str = "", weight: int = 1) -> AsyncIterator[None]:
        await self.acquire(tenant, weight)
        try:
            yield
        finally:
            self.release(tenant, weight)


class CountGate(_KeyedSlots):
    """At most as many /tokenize calls at once as admission holds and queues (limit +
    max_waiting), at most admission's tenant share of them a key's; a call past them waits its
    turn as a request waits for a slot, at most admission's timeout, then is refused as
    admission refuses (429, Retry-After), while other keys' calls go past it. (Found by a
    probe: counting came before admission, so 40 chats at once made 40 concurrent /tokenize
    calls with PROXY_MAX_INFLIGHT=2 and PROXY_MAX_WAITING=0. A review then found that refusing
    at once refused cache hits, which are counted but take no slot; and later that one key
    could take every turn.)"""

    def __init__(self, admission: Admission) -> None:
        size = admission.limit + admission.max_waiting
        super().__init__(size, max(1, math.floor(size * admission.tenant_share)),
                         admission.timeout)
        self.admission = admission

    @asynccontextmanager
    async def hold(self, tenant: str | None = None) -> AsyncIterator[None]:
        """A turn for `tenant`: by default the key of the request this task serves."""
        key = request_key.get() if tenant is None else tenant
        if self._fits_now(key, 1):
            self._take(key, 1)
        else:
            try:
                await self._wait(key, 1)
            except TimeoutError:
                raise self.admission.refuse(
                    f"no turn to count tokens at vLLM within {self.timeout:g} s "
                    f"({self.inflight} counts in progress, {self.held.get(key, 0)} of them "
                    f"this key's)") from None
        try:
            yield
        finally:
            self._give(key, 1)
