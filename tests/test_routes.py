"""The small endpoints: /metrics and /ready behind PROXY_METRICS_KEY when it is set."""

from __future__ import annotations

import asyncio

import pytest

from proxy.settings import Settings
from tests.support.fake_upstream import FakeReply, FakeVllm
from tests.support.proxy_app import proxy_client


@pytest.mark.parametrize("path", ["/metrics", "/ready"])
async def test_operator_endpoints_need_the_key_when_set(path: str) -> None:
    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="off", metrics_key="ops-secret")
    async with proxy_client(s, transport=fake.transport) as c:
        none = await c.get(path)
        wrong = await c.get(path, headers={"Authorization": "Bearer nope"})
        right = await c.get(path, headers={"Authorization": "Bearer ops-secret"})
        health = await c.get("/health")
    assert none.status_code == wrong.status_code == 401
    assert none.json()["error"]["type"] == "authentication_error"
    assert right.status_code == 200 and health.status_code == 200


async def test_operator_endpoints_are_open_without_a_key() -> None:
    fake = FakeVllm()
    async with proxy_client(Settings(upstreams=("http://vllm:8000",), cache="off"),
                            transport=fake.transport) as c:
        assert (await c.get("/metrics")).status_code == 200
        assert (await c.get("/ready")).status_code == 200


@pytest.mark.parametrize("path", ["/v1/models", "/health", "/version", "/ready",
                                  "/admin/cache/stats"])
async def test_head_on_a_get_route_is_405_as_vllm_answers_it(path: str) -> None:
    # vLLM 0.32's app (build_app, FastAPI routes) answers HEAD /v1/models, /health, /version
    # with 405 and `allow: GET`; Starlette's GET routes answered HEAD (and HEAD /v1/models
    # went upstream). HEAD /metrics stays: vLLM's /metrics mount answers it 200.
    fake = FakeVllm()
    async with proxy_client(Settings(upstreams=("http://vllm:8000",), cache="off",
                                     admin_key="adm"), transport=fake.transport) as c:
        sent = len(fake.requests)
        head = await c.head(path, headers={"Authorization": "Bearer adm"})
        assert len(fake.requests) == sent  # nothing reached vLLM
        assert (await c.get(path, headers={"Authorization": "Bearer adm"})).status_code == 200
        assert (await c.head("/metrics")).status_code == 200
    assert head.status_code == 405
    assert head.headers["allow"] == "GET"
    assert head.headers["content-type"] == "application/json"


async def test_a_wrong_method_names_the_allowed_one() -> None:
    async with proxy_client(Settings(upstreams=("http://vllm:8000",), cache="off"),
                            transport=FakeVllm().transport) as c:
        wrong = await c.post("/v1/models")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"
    assert wrong.json()["error"]["code"] == "method_not_allowed"


async def test_version_is_vllms() -> None:
    # vLLM answers GET /version with its version (no API key needed); the proxy said 404
    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="off", api_keys=("k",))
    async with proxy_client(s, transport=fake.transport) as c:
        got = await c.get("/version")
    assert got.status_code == 200 and got.json() == {"version": "0.32.0"}
    assert got.headers["content-type"] == "application/json"


async def test_version_is_not_a_way_to_the_upstream_for_anyone() -> None:
    # found by a review: GET /version is open (no key, no admission, no key limits), and each
    # request was one upstream call: anyone could keep the upstream connection pool busy
    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="off", api_keys=("sk-a",))
    async with proxy_client(s, transport=fake.transport) as c:
        got = await asyncio.gather(*(c.get("/version") for _ in range(20)))
    assert all(g.status_code == 200 and g.json() == {"version": "0.32.0"} for g in got)
    assert len([r for r in fake.requests if r.url.endswith("/version")]) == 1


async def test_models_is_not_a_way_to_the_upstream_for_anyone() -> None:
    # found by a probe: GET /v1/models was one upstream call per request, outside admission
    # and the key's limits: 40 at once were 40 upstream calls (each a pooled connection) with
    # PROXY_MAX_INFLIGHT=2 and a key allowed 1 request a minute, 1 at a time. Now one call at
    # a time, its answer kept (the clock stands still here); vLLM's answer to every client
    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="off", api_keys=("k1",), max_inflight=2,
                 max_waiting=0, key_limits='{"*": {"rpm": 1, "concurrent": 1}}')
    auth = {"authorization": "Bearer k1"}
    async with proxy_client(s, transport=fake.transport, clock=lambda: 0.0) as c:
        before = len(fake.completions("/v1/models"))  # the catalog's, at start
        got = await asyncio.gather(*(c.get("/v1/models", headers=auth) for _ in range(40)))
        keyless = await c.get("/v1/models")
        sent = len(fake.completions("/v1/models")) - before
    vllms = await fake.handle("GET", "http://vllm:8000/v1/models", {}, b"")
    assert sent == 1, f"{sent} upstream /v1/models calls for 40 requests"
    # vLLM does not limit /v1/models: neither do the key's limits (its key is still checked)
    assert all(g.status_code == 200 and g.content == vllms.content for g in got)
    assert all(g.headers["content-type"] == "application/json" for g in got)
    assert keyless.status_code == 401


async def test_a_failed_models_answer_is_passed_on_and_not_kept() -> None:
    # vLLM's error reaches the client as vLLM sent it; the next request asks again
    fake = FakeVllm()
    original = fake.handle
    failing = [True]

    async def handle(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        if url.endswith("/v1/models") and failing[0]:
            return FakeReply(500, json_body={"error": {"message": "engine busy"}})
        return await original(method, url, headers, body)

    fake.handle = handle  # type: ignore[method-assign]
    async with proxy_client(Settings(upstreams=("http://vllm:8000",), cache="off"),
                            transport=fake.transport, clock=lambda: 0.0) as c:
        failed = await c.get("/v1/models")
        failing[0] = False
        answered = await c.get("/v1/models")
        again = await c.get("/v1/models")
    assert failed.status_code == 500 and failed.json()["error"]["message"] == "engine busy"
    assert answered.status_code == again.status_code == 200
    assert answered.json()["data"][0]["id"] == "tiny"
