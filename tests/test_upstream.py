import pytest

from proxy.balancer import Balancer
from proxy.errors import UpstreamHTTPError, UpstreamUnavailable
from proxy.metrics import Metrics
from proxy.upstream import Upstream
from tests.support.fake_upstream import FakeReply, FakeTransport, FakeVllm

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


def scripted(replies: dict[str, dict[str, int]]) -> tuple[FakeTransport, list[str]]:
    """A transport whose backends answer fixed statuses per path (default 200)."""
    seen: list[str] = []

    async def handle(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        seen.append(url)
        origin, path = "/".join(url.split("/", 3)[:3]), "/" + url.split("/", 3)[3]
        status = replies.get(origin, {}).get(path, 200)
        return FakeReply(status, json_body={"error": {"message": f"{origin} {status}"}}
                         if status >= 400 else {"ok": origin})
    return FakeTransport(handle), seen


@pytest.mark.parametrize("status", [502, 503, 504])
async def test_a_gateway_status_fails_over_and_marks_the_replica_down(status):
    # found by a review: a replica answering 503 at once kept its in-flight count at 0, so
    # least-loaded kept choosing it and 55 of 60 requests failed
    transport, seen = scripted({A: {"/v1/completions": status}})
    up = Upstream(transport, Balancer((A, B), backoff=60), Metrics())
    assert b"http://b:2" in await up.fetch("POST", "/v1/completions", b"{}")
    assert [s["state"] for s in up.balancer.state()] == ["down", "up"]
    await up.fetch("POST", "/v1/completions", b"{}")
    assert [u.split("/v1")[0] for u in seen] == [A, B, B]  # a is skipped while down
    assert all(b.inflight == 0 for b in up.balancer.backends)


async def test_a_500_fails_over_only_when_the_replicas_health_fails_too():
    # an engine that died: completions 500 and /health 503
    transport, seen = scripted({A: {"/v1/completions": 500, "/health": 503}})
    up = Upstream(transport, Balancer((A, B), backoff=60), Metrics())
    assert b"http://b:2" in await up.fetch("POST", "/v1/completions", b"{}")
    assert up.balancer.state()[0]["state"] == "down"
    assert up.balancer.state()[0]["failures"] == 1  # one failure, counted once (by the probe)
    # a 500 for this request alone (the replica is healthy): vLLM's answer, nobody marked down
    transport, seen = scripted({A: {"/v1/completions": 500}, B: {"/v1/completions": 500}})
    up = Upstream(transport, Balancer((A, B), backoff=60), Metrics())
    with pytest.raises(UpstreamHTTPError) as info:
        await up.fetch("POST", "/v1/completions", b"{}")
    assert info.value.status == 500 and len([u for u in seen if "/v1/" in u]) == 1
    assert [s["state"] for s in up.balancer.state()] == ["up", "up"]


async def test_the_last_gateway_error_is_the_answer_when_every_replica_gives_one():
    transport, _ = scripted({A: {"/v1/completions": 503}, B: {"/v1/completions": 503}})
    up = Upstream(transport, Balancer((A, B), backoff=60), Metrics())
    with pytest.raises(UpstreamHTTPError) as info:
        await up.fetch("POST", "/v1/completions", b"{}")
    assert info.value.status == 503 and b"http://b:2 503" in info.value.content


async def test_a_failing_health_probe_marks_down():
    transport, _ = scripted({A: {"/health": 503}})
    up = Upstream(transport, Balancer((A,), backoff=60), Metrics())
    assert not await up.probe(up.balancer.backends[0])
    assert up.balancer.state()[0]["state"] == "down"


async def test_a_refused_replica_is_told_to_the_policy():
    from proxy.routing.protocol import Choice, RouteRequest

    told: list[tuple[str, object]] = []

    class Spy:
        name, wants_tokens = "spy", False

        async def key(self, request: object) -> object:
            return "k"

        def choose(self, candidates: list, key: object) -> Choice:
            return Choice(candidates[0])

        def refused(self, choice: Choice, key: object) -> None:
            told.append((choice.backend.url, key))

    fake = FakeVllm(connect_error={A})
    up = Upstream(fake.transport, Balancer((A, B), backoff=60, policy=Spy()), Metrics())
    stream = await up.open("POST", "/v1/completions", b'{"model": "tiny", "prompt": "x"}',
                           route=RouteRequest())
    await stream.aclose()
    assert told == [(A, "k")] and stream.backend.url == B
