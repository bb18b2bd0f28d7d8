import pytest

from proxy.balancer import Balancer
from proxy.errors import UpstreamHTTPError, UpstreamUnavailable
from proxy.metrics import Metrics
from proxy.upstream import Upstream
from tests.support.fake_upstream import FakeVllm

A, B = "http://a:1", "http://b:2"


def upstream(fake: FakeVllm, *urls: str) -> Upstream:
    return Upstream(fake.transport, Balancer(urls or (A,), backoff=60), Metrics())


async def test_error_status_keeps_vllms_body():
    fake = FakeVllm(fail_with=(422, {"error": {"message": "m"}}))
    with pytest.raises(UpstreamHTTPError) as info:
        await upstream(fake).fetch("POST", "/v1/completions", b"{}")
    assert info.value.status == 422 and b'"m"' in info.value.content


async def test_connect_error_fails_over_and_marks_down():
    fake = FakeVllm(connect_error={A})
    up = upstream(fake, A, B)
    assert b"tiny" in await up.fetch("GET", "/v1/models")
    a, b = up.balancer.backends
    assert [s["state"] for s in up.balancer.state()] == ["down", "up"]
    assert a.inflight == b.inflight == 0
    await up.fetch("GET", "/v1/models")
    assert all(r.url.startswith(B) for r in fake.requests)  # a is skipped while down
    metrics = up.metrics.render().decode()
    assert 'proxy_upstream_errors_total{kind="UpstreamUnavailable",upstream="http://a:1"}' \
        in metrics


async def test_all_down_is_503():
    fake = FakeVllm(connect_error={A, B})
    with pytest.raises(UpstreamUnavailable):
        await upstream(fake, A, B).fetch("GET", "/v1/models")


async def test_stream_counts_inflight_until_closed():
    fake = FakeVllm()
    up = upstream(fake)
    stream = await up.open("POST", "/v1/completions",
                           b'{"model": "tiny", "prompt": "x", "stream": true}')
    assert up.balancer.backends[0].inflight == 1
    body = b"".join([c async for c in stream.chunks()])
    await stream.aclose()
    await stream.aclose()
    assert body.endswith(b"data: [DONE]\n\n") and up.balancer.backends[0].inflight == 0


async def test_probe_marks_up_and_down():
    fake = FakeVllm()
    up = upstream(fake, A)
    assert await up.probe(up.balancer.backends[0])
    fake.connect_error.add(A)
    assert not await up.probe(up.balancer.backends[0])
    assert up.balancer.state()[0]["state"] == "down"
