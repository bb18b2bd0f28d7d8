"""Input bounds: nesting depth, message count, prompt-batch size; each names its limit."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.bounds import INLINE_BYTES, Bounds, TooDeep, TooManyItems, depth_exceeds, prompt_count
from proxy.errors import BadRequest
from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client

UP = "http://vllm:8000"


def nest(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize(("depth", "limit", "over"), [(0, 1, False), (1, 1, False), (2, 1, True),
                                              (64, 64, False), (65, 64, True),
                                              (1000, 64, True)])
def test_depth_exceeds(depth: int, limit: int, over: bool) -> None:
    assert depth_exceeds(nest(depth), limit) is over


def test_depth_counts_the_deepest_branch_not_the_width() -> None:
    wide = {"a": [[1]] * 10_000, "b": nest(5)}
    assert not depth_exceeds(wide, 6)
    assert depth_exceeds(wide, 5)


@pytest.mark.parametrize(("prompt", "n"), [("hi", 1), ([1, 2, 3], 1), (["a", "b"], 2),
                                      ([[1], [2], [3]], 3), ([], 1)])
def test_prompt_count(prompt: Any, n: int) -> None:
    assert prompt_count(prompt) == n


@pytest.mark.parametrize("size", [100, INLINE_BYTES * 2])  # inline, and in a worker thread
async def test_parse_rejects_deep_json_naming_the_limit(size: int) -> None:
    raw = orjson.dumps({"pad": "x" * size, "messages": nest(10)})
    with pytest.raises(TooDeep) as err:
        await Bounds(max_depth=8).parse(raw, "chat")
    assert err.value.status == 400 and "PROXY_MAX_JSON_DEPTH" in err.value.message
    assert (await Bounds(max_depth=11).parse(raw, "chat"))["pad"] == "x" * size


async def test_parse_keeps_the_plain_json_errors() -> None:
    with pytest.raises(BadRequest):
        await Bounds().parse(b"[1]", "chat")


def test_counts_name_their_limits() -> None:
    b = Bounds(max_messages=2, max_prompts=2)
    b.check_counts("chat", {"messages": [{}, {}]})
    b.check_counts("completions", {"prompt": [1, 2, 3, 4]})
    b.check_counts("chat", {"messages": "not a list: validation says so"})
    b.check_counts("completions", {})
    with pytest.raises(TooManyItems, match=r"3 messages.*PROXY_MAX_MESSAGES") as err:
        b.check_counts("chat", {"messages": [{}, {}, {}]})
    assert err.value.status == 413 and err.value.param == "messages"
    with pytest.raises(TooManyItems, match=r"3 prompts.*PROXY_MAX_PROMPTS"):
        b.check_counts("completions", {"prompt": ["a", "b", "c"]})


@pytest.mark.parametrize("depth", [100, 253, 254, 600, 1023])
async def test_deep_json_in_any_field_is_a_400_not_a_500(depth: int) -> None:
    fake = FakeVllm()
    s = Settings(upstreams=(UP,), cache="off")
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with proxy_client(s, transport=fake.transport) as c:
        for field in ("tools", "metadata", "stop"):
            raw = orjson.dumps(chat)[:-1] + b',"' + field.encode() + b'":' \
                + b"[" * depth + b"]" * depth + b"}"  # orjson cannot write it this deep
            r = await c.post("/v1/chat/completions", content=raw,
                             headers={"content-type": "application/json"})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["code"] == "json_too_deep"
    assert fake.completions() == []


async def test_too_many_messages_and_prompts_are_413() -> None:
    fake = FakeVllm()
    s = Settings(upstreams=(UP,), cache="off", max_messages=3, max_prompts=2)
    async with proxy_client(s, transport=fake.transport) as c:
        r = await c.post("/v1/chat/completions", json={
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}] * 4})
        p = await c.post("/v1/completions", json={"model": "tiny", "prompt": ["a"] * 3})
        ok = await c.post("/v1/completions", json={"model": "tiny", "prompt": ["a"] * 2})
    assert r.status_code == 413 and "PROXY_MAX_MESSAGES" in r.json()["error"]["message"]
    assert p.status_code == 413 and "PROXY_MAX_PROMPTS" in p.json()["error"]["message"]
    assert ok.status_code == 200
