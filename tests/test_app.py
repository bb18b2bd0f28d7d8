import asyncio
import subprocess
import sys

from proxy.readiness import READY_KEPT
from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.procs import REPO
from tests.support.proxy_app import proxy_client

A, B = "http://a:1", "http://b:2"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


def settings(**kw) -> Settings:
    return Settings(**{"upstreams": (A,), "cache": "off", **kw})


async def test_many_apps_each_with_their_own_metrics():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as one, \
            proxy_client(settings(), transport=fake.transport) as two:
        await one.post("/v1/chat/completions", json=CHAT)
        m1, m2 = (await one.get("/metrics")).text, (await two.get("/metrics")).text
    line = 'proxy_requests_total{route="/v1/chat/completions",status="200"} 1.0'
    assert line in m1 and line not in m2


async def test_starts_with_the_upstream_down_and_recovers():
    fake, now = FakeVllm(connect_error={A}), [0.0]
    async with proxy_client(settings(upstream_backoff=0), transport=fake.transport,
                            clock=lambda: now[0]) as c:
        assert (await c.get("/health")).status_code == 200
        ready = await c.get("/ready")
        assert ready.status_code == 503 and ready.json()["upstreams"][0]["reachable"] is False
        down = await c.post("/v1/chat/completions", json=CHAT)
        assert down.status_code == 503 and down.json()["error"]["type"] == "upstream_unavailable"
        fake.connect_error.clear()
        now[0] += READY_KEPT + 0.001  # /ready's answer is kept that long (proxy/readiness.py)
        assert (await c.get("/ready")).status_code == 200
        assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200


async def test_unknown_routes_and_methods_are_openai_errors():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        missing = await c.get("/v1/nothing")
        wrong = await c.get("/v1/chat/completions")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert wrong.status_code == 405 and "error" in wrong.json()


async def test_admission_429_beyond_in_flight_and_waiting_bounds():
    fake = FakeVllm(gate=asyncio.Event())
    s = settings(max_inflight=1, max_waiting=0, queue_timeout=3)
    async with proxy_client(s, transport=fake.transport) as c:
        first = asyncio.ensure_future(c.post("/v1/chat/completions", json=CHAT))
        await fake.arrived(1)
        refused = await c.post("/v1/chat/completions", json=CHAT)
        fake.gate.set()
        assert (await first).status_code == 200
        after = await c.post("/v1/chat/completions", json=CHAT)
        metrics = (await c.get("/metrics")).text
    assert refused.status_code == 429 and refused.headers["retry-after"] == "3"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert after.status_code == 200
    assert "proxy_admission_rejected_total 1.0" in metrics


async def test_two_upstreams_balance_and_skip_the_dead_one():
    fake = FakeVllm(connect_error={B})
    async with proxy_client(settings(upstreams=(A, B)), transport=fake.transport) as c:
        codes = [(await c.post("/v1/chat/completions", json=CHAT)).status_code for _ in range(4)]
        ready = (await c.get("/ready")).json()
    assert codes == [200] * 4
    assert [u["reachable"] for u in ready["upstreams"]] == [True, False]
    assert ready["status"] == "ready"


async def test_in_flight_spread_across_upstreams():
    fake = FakeVllm(gate=asyncio.Event())
    async with proxy_client(settings(upstreams=(A, B)), transport=fake.transport) as c:
        tasks = [asyncio.ensure_future(c.post("/v1/chat/completions", json=CHAT))
                 for _ in range(4)]
        await fake.arrived(4)
        fake.gate.set()
        assert [(await t).status_code for t in tasks] == [200] * 4
    hosts = [r.url.split("/")[2] for r in fake.completions()]
    assert sorted(hosts) == ["a:1", "a:1", "b:2", "b:2"]


def test_startup_loads_what_the_first_stream_would_import():
    """A fresh process: after the lifespan, anyio's backend is loaded (not mid-request)."""
    code = (
        "import asyncio, sys\n"
        "from tests.support.fake_upstream import FakeVllm\n"
        "from tests.support.proxy_app import proxy_client\n"
        "from proxy.settings import Settings\n"
        "async def main():\n"
        "    before = 'anyio._backends._asyncio' in sys.modules\n"
        "    async with proxy_client(Settings(cache='off'), transport=FakeVllm().transport):\n"
        "        print(before, 'anyio._backends._asyncio' in sys.modules)\n"
        "asyncio.run(main())\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.split()[-2:] == ["False", "True"], out.stdout + out.stderr
