"""GET /ready (proxy/readiness.py): one round of /health probes at a time, shared by every
request meanwhile, its answer (a 503 too) kept READY_KEPT seconds, built by the lifespan."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.readiness import READY_KEPT, Readiness
from proxy.settings import Settings
from tests.support.fake_upstream import FakeReply, FakeTransport, FakeVllm
from tests.support.proxy_app import proxy_client

A, B = "http://a:1", "http://b:2"


class Probed:
    """FakeVllm's answers, each /health probe counted (refused ones too) and held until `go`."""

    def __init__(self, fake: FakeVllm) -> None:
        self.fake = fake
        self.probes: list[str] = []
        self.go = asyncio.Event()
        self.go.set()
        self.arrived = asyncio.Condition()

    async def __call__(self, method: str, url: str, headers: dict[str, str],
                       body: bytes) -> FakeReply:
        if url.endswith("/health"):
            self.probes.append(url)
            async with self.arrived:
                self.arrived.notify_all()
            await self.go.wait()
        return await self.fake.handle(method, url, headers, body)

    async def reached(self, n: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.probes) >= n)


def setup(**kw: Any) -> tuple[Probed, list[float], dict[str, Any]]:
    """The probes seen, the app's clock (moved by hand) and proxy_client's arguments; no
    background health watch (its probes are not /ready's)."""
    probed, now = Probed(FakeVllm(**kw)), [100.0]
    settings = Settings(upstreams=(A, B), cache="off", health_interval=0)
    return probed, now, {"settings": settings, "transport": FakeTransport(probed),
                         "clock": lambda: now[0]}


async def test_the_lifespan_builds_it_before_any_request() -> None:
    _, _, args = setup()
    async with proxy_client(**args) as c:
        kept = c.app.state.ready  # type: ignore[attr-defined]
        assert isinstance(kept, Readiness)
        assert (await c.get("/ready")).status_code == 200
        assert c.app.state.ready is kept  # type: ignore[attr-defined]


async def test_many_at_once_cost_one_probe_a_replica() -> None:
    probed, _, args = setup()
    async with proxy_client(**args) as c:
        probed.go.clear()
        calls = [asyncio.create_task(c.get("/ready")) for _ in range(20)]
        await probed.reached(2)  # the one round: each replica probed, held there
        probed.go.set()
        got = await asyncio.gather(*calls)
    assert all(g.status_code == 200 and g.json()["status"] == "ready" for g in got)
    assert sorted(probed.probes) == [A + "/health", B + "/health"]


async def test_kept_for_its_time_then_probed_again() -> None:
    probed, now, args = setup()
    async with proxy_client(**args) as c:
        first = await c.get("/ready")
        now[0] += READY_KEPT
        again = await c.get("/ready")
        assert len(probed.probes) == 2 and again.json() == first.json()
        now[0] += 0.001
        assert (await c.get("/ready")).status_code == 200
    assert len(probed.probes) == 4


async def test_an_unavailable_answer_is_kept_too() -> None:
    # every replica refusing: each probe waits for its failure, so a flood then costs most
    probed, now, args = setup(connect_error={A, B})
    async with proxy_client(**args) as c:
        down = await c.get("/ready")
        probed.fake.connect_error.clear()
        still = await c.get("/ready")
        assert len(probed.probes) == 2
        assert down.status_code == still.status_code == 503
        assert still.json()["status"] == "unavailable"
        now[0] += READY_KEPT + 0.001
        up = await c.get("/ready")
    assert up.status_code == 200 and len(probed.probes) == 4
    assert [u["reachable"] for u in up.json()["upstreams"]] == [True, True]
