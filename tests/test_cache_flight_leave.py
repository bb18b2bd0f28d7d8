"""Streaming single flight when clients leave: the upstream stream stops once nobody is left,
a waiting twin frees its lease at once, and a leader that does not read holds no follower."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client
from tests.support.waiting import wait_for_async
from tests.test_cache_flight import body, content, lines, served_proxy


async def reading(client: httpx.AsyncClient, text: str
                  ) -> tuple[Any, asyncio.Task[None], httpx.Response]:
    """A stream opened and read in the background, once its first word has come."""
    cm = client.stream("POST", "/v1/chat/completions", json=body(text))
    response = await cm.__aenter__()
    first = asyncio.Event()
    task = asyncio.create_task(lines(response, [], first))
    await first.wait()
    return cm, task, response


def _gauge(metrics: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith(name + " "))


async def counted(client: httpx.AsyncClient, name: str) -> bool:
    """The proxy's counter `name` is at 1 (once, as each test here waits for it)."""
    return f"{name} 1.0" in (await client.get("/metrics")).text


@pytest.mark.parametrize("leader_first", [True, False])
async def test_when_every_client_has_left_the_upstream_stream_is_stopped(
        leader_first: bool) -> None:
    # found by a review: followers were counted in but never out, so a leader whose
    # followers had all left handed its stream over to nobody, and it ran to max_tokens
    # holding an admission slot; a handed-over stream ran on after its followers left too
    resume = asyncio.Event()
    fake = FakeVllm(pause=(3, resume))
    async with fake.served() as upstream, \
            served_proxy(Settings(upstreams=(upstream,), cache="exact")) as url, \
            httpx.AsyncClient(base_url=url, timeout=30) as client:
        lead_cm, leading, _ = await reading(client, "Nobody left")
        follow_cm, following, follow = await reading(client, "Nobody left")
        assert follow.headers["x-cache-tier"] == "flight"
        order = [(leading, lead_cm), (following, follow_cm)]
        for task, cm in order if leader_first else order[::-1]:
            task.cancel()
            await cm.__aexit__(None, None, None)
        metrics = ""

        async def let_go() -> bool:
            nonlocal metrics
            metrics = (await client.get("/metrics")).text
            return _gauge(metrics, "proxy_inflight_requests") == 0

        # the upstream stream is let go, paused as it is
        await wait_for_async(let_go, "nothing in flight", 20, every=0.01)
        resume.set()  # (so that nothing is left waiting on it)
    handovers = _gauge(metrics, "proxy_flight_handovers_total")
    assert handovers == (1.0 if leader_first else 0.0)  # none to a follower already gone


async def test_a_twin_that_leaves_while_waiting_frees_its_key_lease_at_once() -> None:
    # found by a review: a non-streaming twin waiting for the identical request in flight
    # (up to wait_s, 120 s) kept its key's concurrent lease after its client had gone
    resume = asyncio.Event()
    fake = FakeVllm(pause=(3, resume))
    auth = {"Authorization": "Bearer sk-a"}
    async with fake.served() as upstream, \
            served_proxy(Settings(upstreams=(upstream,), cache="exact", api_keys=("sk-a",),
                                  key_limits='{"sk-a": {"concurrent": 2}}')) as url, \
            httpx.AsyncClient(base_url=url, timeout=30, headers=auth) as client:
        lead_cm, leading, _ = await reading(client, "Wait for me")
        twin = asyncio.create_task(client.post("/v1/chat/completions", json={
            **body("Wait for me"), "stream": False}))
        await wait_for_async(lambda: counted(client, "proxy_cache_single_flight_waits_total"),
                             "the twin waits on the flight", 20, every=0.01)
        twin.cancel()  # the twin's client leaves while it waits
        other = httpx.Response(429)

        async def admitted() -> bool:
            nonlocal other
            other = await client.post("/v1/chat/completions", json={
                **body("Something else"), "stream": False, "max_tokens": 1})
            return other.status_code != 429

        # a third request of the key is admitted (2 concurrent: the leader's and this one)
        await wait_for_async(admitted, "the twin's lease is freed", 20)
        assert other.status_code == 200, other.text
        resume.set()
        await leading
        await lead_cm.__aexit__(None, None, None)


async def test_a_leader_whose_client_does_not_read_does_not_hold_its_followers() -> None:
    # found by a review: followers got their end only when the slow leader's own response
    # closed (28 s later, at its send timeout), though the upstream had long finished
    resume = asyncio.Event()
    fake = FakeVllm(pause=(2, resume))  # the role chunk and w0, then the rest on resume
    stuck = asyncio.Event()
    raw = json.dumps(body("Slow reader")).encode()

    async def receive() -> dict[str, Any]:
        if raw_sent.is_set():
            await asyncio.Event().wait()  # never disconnects
        raw_sent.set()
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            stuck.set()
            await asyncio.Event().wait()  # the leader's client reads one piece, then stops

    raw_sent = asyncio.Event()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
             "raw_path": b"/v1/chat/completions", "query_string": b"", "root_path": "",
             "headers": [(b"content-type", b"application/json"), (b"host", b"proxy")],
             "client": ("127.0.0.1", 1), "server": ("proxy", 80)}
    async with proxy_client(Settings(upstreams=("http://vllm:8000",), cache="exact",
                                     send_timeout=60.0), transport=fake.transport) as c:
        leader = asyncio.create_task(c.app(scope, receive, send))  # type: ignore[attr-defined]
        await stuck.wait()
        follow = asyncio.create_task(c.post("/v1/chat/completions", json=body("Slow reader")))
        await wait_for_async(lambda: counted(c, "proxy_cache_single_flight_streams_total"),
                             "the follower follows the leader's stream", 10, every=0.01)
        resume.set()
        async with asyncio.timeout(10):  # not the leader's 60 s send timeout
            r = await follow
        leader.cancel()
        await asyncio.gather(leader, return_exceptions=True)
    assert r.headers["x-cache-tier"] == "flight"
    text, end = content([x for x in r.text.split("\n") if x.startswith("data: ")])
    assert (text, end) == (" w0 w1 w2 w3 w4 w5 w6 w7", "[DONE]")
