"""GET /version's answer cache (proxy/version.py): one upstream call at a time, kept 60 s,
built by the app's lifespan."""

from __future__ import annotations

import asyncio
import gc

import pytest

from proxy.errors import UpstreamUnavailable
from proxy.settings import Settings
from proxy.version import VERSION_KEPT, VersionCache
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client
from tests.support.waiting import wait_for_async


class Asked:
    """The upstream call, counted; held until `go` is set when `hold` is on."""

    def __init__(self, hold: bool = False) -> None:
        self.calls = 0
        self.started = asyncio.Event()
        self.go = asyncio.Event()
        if not hold:
            self.go.set()
        self.fail = False
        self.answered = asyncio.Event()  # the last call has returned its answer

    async def __call__(self) -> bytes:
        self.calls += 1
        self.started.set()
        await self.go.wait()
        if self.fail:
            raise UpstreamUnavailable("no replica answered")
        self.answered.set()
        return b'{"version":"%d"}' % self.calls


async def test_the_lifespan_builds_the_cache_before_any_request() -> None:
    async with proxy_client(Settings(upstreams=("http://vllm:8000",), cache="off"),
                            transport=FakeVllm().transport) as c:
        kept = c.app.state.version  # type: ignore[attr-defined]
        assert isinstance(kept, VersionCache)
        assert (await c.get("/version")).json() == {"version": "0.32.0"}
        assert c.app.state.version is kept  # type: ignore[attr-defined]


async def test_an_answer_is_kept_for_its_time_then_asked_again() -> None:
    now = [100.0]
    asked = Asked()
    kept = VersionCache(asked, clock=lambda: now[0])
    assert await kept.get() == b'{"version":"1"}'
    now[0] += VERSION_KEPT
    assert await kept.get() == b'{"version":"1"}' and asked.calls == 1
    now[0] += 0.001
    assert await kept.get() == b'{"version":"2"}' and asked.calls == 2


async def test_a_failure_is_shared_by_the_callers_meanwhile_and_not_kept() -> None:
    asked = Asked(hold=True)
    asked.fail = True
    kept = VersionCache(asked)
    callers = [asyncio.create_task(kept.get()) for _ in range(5)]
    await asked.started.wait()  # the first made the call; the others run before it did
    asked.go.set()
    got = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(g, UpstreamUnavailable) for g in got) and asked.calls == 1
    asked.fail = False
    assert await kept.get() == b'{"version":"2"}'


async def _caller_leaves(kept: VersionCache, asked: Asked) -> None:
    """A caller asks, the call starts, the caller is cancelled before the call ends."""
    leaving = asyncio.create_task(kept.get())
    await asked.started.wait()
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving


async def test_a_caller_that_leaves_does_not_cancel_the_call() -> None:
    asked = Asked(hold=True)
    kept = VersionCache(asked)
    await _caller_leaves(kept, asked)
    staying = asyncio.create_task(kept.get())
    asked.go.set()
    assert await staying == b'{"version":"1"}' and asked.calls == 1


async def test_close_cancels_the_call_in_flight() -> None:
    asked = Asked(hold=True)
    kept = VersionCache(asked)
    waiting = asyncio.create_task(kept.get())
    await asked.started.wait()
    await kept.aclose()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_an_answer_nobody_stayed_for_is_kept_from_when_it_came() -> None:
    # its only caller left; the call ended then. Asked again much later, that old answer was
    # served as new (and kept 60 s more): the call, not its waiters, keeps its answer now.
    now = [100.0]
    asked = Asked(hold=True)
    kept = VersionCache(asked, clock=lambda: now[0])
    await _caller_leaves(kept, asked)
    asked.go.set()
    await asked.answered.wait()
    now[0] += VERSION_KEPT + 1
    assert await kept.get() == b'{"version":"2"}' and asked.calls == 2


async def test_a_failure_nobody_stayed_for_is_not_logged_as_unretrieved() -> None:
    # every caller left, then the call failed: asyncio reported "Task exception was never
    # retrieved" when the task was collected (log noise for an expected upstream failure)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        await _leave_then_fail()  # its cache and task are garbage once it returns
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert not [c for c in reported if "never retrieved" in str(c.get("message"))]


async def _leave_then_fail() -> None:
    asked = Asked(hold=True)
    asked.fail = True
    kept = VersionCache(asked)
    await _caller_leaves(kept, asked)
    asked.go.set()

    async def ended() -> bool:  # the call clears itself when it ends
        return kept._asking is None

    await wait_for_async(ended, "the failed call ended", deadline=5.0, every=0.001)
