"""/v1/completions uses the exact tier only by default (PROXY_CACHE_EXACT_ONLY=completions).

vLLM continues a completions prompt from its every character: "import numpy as np\\nnp" and
"...np." have different continuations, as do "def fib(n):\\n" and the same with the next
line's indent. A prompt is not a question, so no other prompt is the same request; with the
semantic tier on, verify.same_question (spacing, a trailing "."/"?"/"!") served each the
other's answer as a semantic HIT at the default settings (found by a review). Chat questions
keep the semantic tier."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.policy import exact_only
from proxy.settings import Settings
from proxy.settings_env import cli_env, load_settings, parse_cli
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client

UP = "http://vllm:8000"
# (stored, asked): one prompt, then another that differs by trailing spacing or a "." only
PROMPTS = [("import numpy as np\nnp", "import numpy as np\nnp."),
           ("def fib(n):\n", "def fib(n):\n    "),
           ("Q: name a color\nA:", "Q: name a color\nA: "),
           ("The capital of France is", "The capital of France is.")]


def test_by_default_completions_are_exact_only_and_chat_is_not() -> None:
    for s in (Settings(), load_settings({})):
        assert s.cache_exact_only == ("completions",)
        assert exact_only("completions", "", None, s.cache_exact_only)
        assert not exact_only("chat", "", None, s.cache_exact_only)
        assert not exact_only("chat", "abcd", None, s.cache_exact_only)


@pytest.mark.parametrize("settings", [
    lambda: load_settings({"PROXY_CACHE_EXACT_ONLY": ""}),
    lambda: load_settings({"PROXY_CACHE_EXACT_ONLY": " , "}),
    lambda: parse_cli(["--cache-exact-only", ""], env={}),
    # `serve` hands its flags to the worker processes as PROXY_* variables
    lambda: load_settings(cli_env(["--cache-exact-only", ""])),
])
def test_an_empty_setting_makes_no_route_exact_only(settings: Any) -> None:
    s = settings()
    assert s.cache_exact_only == ()
    assert not exact_only("completions", "", None, s.cache_exact_only)
    assert not exact_only("chat", "", None, s.cache_exact_only)


def completion(prompt: str) -> dict[str, Any]:
    return {"model": "tiny", "prompt": prompt, "max_tokens": 4}


def chat(text: str) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 4}


async def test_a_prompt_one_character_off_is_a_miss_while_chat_keeps_the_semantic_tier() -> None:
    fake = FakeVllm()
    async with proxy_client(Settings(upstreams=(UP,)), transport=fake.transport) as c:
        for stored, asked in PROMPTS:
            first = await c.post("/v1/completions", json=completion(stored))
            assert first.status_code == 200 and first.headers["X-Cache"] == "MISS"
            same = await c.post("/v1/completions", json=completion(stored))
            assert (same.headers["X-Cache"], same.headers["X-Cache-Tier"]) == ("HIT", "exact")
            other = await c.post("/v1/completions", json=completion(asked))
            assert other.status_code == 200
            assert other.headers["X-Cache"] == "MISS", (stored, asked, dict(other.headers))
        assert [r.json["prompt"] for r in fake.completions("/v1/completions")] == [
            p for pair in PROMPTS for p in pair]  # each MISS went to vLLM
        # the same question written otherwise is still one chat question (verify.same_question)
        q = await c.post("/v1/chat/completions", json=chat("How do I reverse a list in Python?"))
        assert q.headers["X-Cache"] == "MISS"
        hit = await c.post("/v1/chat/completions", json=chat("How do I reverse a list in Python"))
        assert (hit.headers["X-Cache"], hit.headers["X-Cache-Tier"]) == ("HIT", "semantic")


async def test_an_operator_may_give_completions_the_semantic_tier_back() -> None:
    fake = FakeVllm()
    s = Settings(upstreams=(UP,), cache_exact_only=())
    async with proxy_client(s, transport=fake.transport) as c:
        stored, asked = PROMPTS[-1]
        first = await c.post("/v1/completions", json=completion(stored))
        assert first.headers["X-Cache"] == "MISS"
        other = await c.post("/v1/completions", json=completion(asked))
        assert (other.headers["X-Cache"], other.headers["X-Cache-Tier"]) == ("HIT", "semantic")
