"""Answers that carry more than their text (a reasoning parser's `reasoning`, the token ids of
`return_token_ids`): the cache serves them only in the forms it can reproduce exactly. Found by
a review: a streamed answer's reasoning was folded away (a JSON hit said `reasoning: null`), a
JSON answer replayed as a stream lost its reasoning and token ids, and a cut to a shorter
max_tokens kept every token id of the longer answer."""

from __future__ import annotations

import json
from typing import Any

from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client
from tests.test_handler import settings, sse_events

ASK = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}
THOUGHT = "let me think"


class Extras(FakeVllm):
    """vLLM with a reasoning parser (a reasoning delta first; `reasoning` on the message) and
    `return_token_ids` (one id per generated token, 100 onwards)."""

    def _sse(self, data: dict[str, Any], chat: bool) -> list[bytes]:
        events = super()._sse(data, chat)
        out: list[bytes] = []
        n = 0
        for raw in events:
            if raw.startswith(b"data: {"):
                obj = json.loads(raw[6:])
                for choice in obj["choices"]:
                    if (choice.get("delta") or {}).get("content") and data.get("return_token_ids"):
                        choice["token_ids"] = [100 + n]
                        n += 1
                raw = b"data: " + json.dumps(obj).encode() + b"\n\n"
            out.append(raw)
        if not data.get("return_token_ids"):
            thought = {"id": "cmpl-fake", "created": 1, "model": self.model,
                       "object": "chat.completion.chunk", "choices": [
                           {"index": 0, "delta": {"reasoning": THOUGHT}, "finish_reason": None}]}
            out.insert(1, b"data: " + json.dumps(thought).encode() + b"\n\n")
        return out

    def _json(self, data: dict[str, Any], chat: bool) -> dict[str, Any]:
        answer = super()._json(data, chat)
        choice = answer["choices"][0]
        if data.get("return_token_ids"):
            choice["token_ids"] = [100 + i for i in range(answer["usage"]["completion_tokens"])]
        else:
            choice["message"]["reasoning"] = THOUGHT
        return answer


def streamed(text: str) -> tuple[str, list[int]]:
    """A chat stream's reasoning and token ids, joined."""
    thought, ids = "", []
    for raw in sse_events(text)[:-1]:
        for choice in json.loads(raw).get("choices") or ():
            thought += (choice.get("delta") or {}).get("reasoning") or ""
            ids += choice.get("token_ids") or []
    return thought, ids


async def test_a_streamed_answers_reasoning_is_not_lost_in_a_json_hit():
    async with proxy_client(settings(cache="exact"), transport=Extras().transport) as c:
        await c.post("/v1/chat/completions", json={**ASK, "stream": True})
        r = await c.post("/v1/chat/completions", json=ASK)
    assert r.json()["choices"][0]["message"].get("reasoning") == THOUGHT, r.headers["x-cache"]


async def test_a_json_answers_reasoning_is_not_lost_in_a_streamed_hit():
    async with proxy_client(settings(cache="exact"), transport=Extras().transport) as c:
        await c.post("/v1/chat/completions", json=ASK)
        r = await c.post("/v1/chat/completions", json={**ASK, "stream": True})
    assert streamed(r.text)[0] == THOUGHT, r.headers["x-cache"]


async def test_a_json_answers_token_ids_are_not_lost_in_a_streamed_hit():
    ask = {**ASK, "return_token_ids": True}
    async with proxy_client(settings(cache="exact"), transport=Extras().transport) as c:
        await c.post("/v1/chat/completions", json=ask)
        r = await c.post("/v1/chat/completions", json={**ask, "stream": True})
    assert streamed(r.text)[1] == list(range(100, 106)), r.headers["x-cache"]


async def test_a_cut_answer_has_the_token_ids_of_its_cut():
    ask = {**ASK, "return_token_ids": True}
    async with proxy_client(settings(cache="exact"), transport=Extras().transport) as c:
        await c.post("/v1/chat/completions", json={**ask, "stream": True})
        r = await c.post("/v1/chat/completions", json={**ask, "max_tokens": 3})
        s = await c.post("/v1/chat/completions", json={**ask, "max_tokens": 3, "stream": True})
    choice = r.json()["choices"][0]
    assert choice["message"]["content"] == " w0 w1 w2"
    assert choice["token_ids"] == [100, 101, 102], r.headers["x-cache"]
    assert streamed(s.text)[1] == [100, 101, 102], s.headers["x-cache"]


async def test_plain_answers_still_hit_in_every_form():
    fake = FakeVllm()
    async with proxy_client(settings(cache="exact"), transport=fake.transport) as c:
        await c.post("/v1/chat/completions", json={**ASK, "stream": True})
        hits = [(await c.post("/v1/chat/completions", json=ask)).headers["x-cache"]
                for ask in (ASK, {**ASK, "max_tokens": 3}, {**ASK, "max_tokens": 3,
                                                            "stream": True})]
    assert hits == ["HIT", "HIT", "HIT"]


class Logprobs(FakeVllm):
    """vLLM's answer to `logprobs` / `prompt_logprobs` of 0: not none, but each token's own
    logprob (0 asks for no alternatives, not for no logprobs)."""

    def _json(self, data: dict[str, Any], chat: bool) -> dict[str, Any]:
        answer = super()._json(data, chat)
        if not chat and data.get("logprobs") is not None:
            answer["choices"][0]["logprobs"] = {"tokens": ["w"], "token_logprobs": [-0.5]}
        if data.get("prompt_logprobs") is not None:  # on the answer (chat), on the choice
            (answer if chat else answer["choices"][0])["prompt_logprobs"] = [
                None, {"7": {"logprob": -1.0}}]
        return answer


async def test_logprobs_of_zero_is_not_served_an_answer_without_them():
    """Found by a review: `logprobs: 0` (completions) and `prompt_logprobs: 0` were taken for
    "no logprobs", so they shared the plain request's entry and got its answer without them."""
    plain = {"model": "tiny", "prompt": "hi", "max_tokens": 4}
    chat = {**ASK, "max_tokens": 4}
    asks = [("/v1/completions", plain, {**plain, "logprobs": 0}),
            ("/v1/completions", plain, {**plain, "prompt_logprobs": 0}),
            ("/v1/chat/completions", chat, {**chat, "prompt_logprobs": 0})]
    async with proxy_client(settings(cache="exact"), transport=Logprobs().transport) as c:
        for path, first, second in asks:
            await c.post(path, json=first)
            r = await c.post(path, json=second)
            body = r.json()
            choice = body["choices"][0]
            got = choice.get("logprobs") if "logprobs" in second \
                else body.get("prompt_logprobs") or choice.get("prompt_logprobs")
            assert got, (path, second, r.headers["x-cache"])
