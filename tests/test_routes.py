"""The small endpoints: /metrics and /ready behind PROXY_METRICS_KEY when it is set."""

from __future__ import annotations

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
