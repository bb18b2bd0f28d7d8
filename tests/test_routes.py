"""The small endpoints: /metrics and /ready behind PROXY_METRICS_KEY when it is set."""

from __future__ import annotations

import asyncio

import pytest

from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
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
