"""POST /v1/responses under the proxy's policy (proxy/responses.py), as chat is: forced greedy
sampling and the output cap on `max_output_tokens`, so this route is no way around them; the
values the proxy overwrites are checked first, refused as vLLM refuses them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client


async def ask(body: dict[str, Any], **kw: Any) -> tuple[Any, FakeVllm]:
    fake = FakeVllm()
    s = Settings(**{"upstreams": ("http://vllm:8000",), "cache": "off", **kw})
    async with proxy_client(s, transport=fake.transport) as c:
        got = await c.post("/v1/responses", content=json.dumps(body),  # NaN too, as vLLM
                           headers={"content-type": "application/json"})
    return got, fake


def sent(fake: FakeVllm) -> dict[str, Any]:
    seen = fake.completions("/v1/responses")
    assert len(seen) == 1
    body: dict[str, Any] = seen[0].json
    return body


async def test_passes_through_with_vllms_answer() -> None:
    got, fake = await ask({"model": "tiny", "input": "hi", "max_output_tokens": 3,
                           "instructions": "be brief", "metadata": {"a": "b"}})
    assert got.status_code == 200, got.text
    assert got.json()["output"][0]["content"][0]["text"] == " w0 w1 w2"
    upstream = sent(fake)
    assert upstream["instructions"] == "be brief" and upstream["metadata"] == {"a": "b"}
    assert "x-cache" not in got.headers


async def test_the_output_cap_applies_to_max_output_tokens() -> None:
    got, fake = await ask({"input": "hi", "max_output_tokens": 1000}, max_output_tokens=8)
    assert got.status_code == 200
    assert sent(fake)["max_output_tokens"] == 8
    assert got.headers["x-proxy-max-tokens-clipped"] == "1000->8"
    unset, fake = await ask({"input": "hi"}, max_output_tokens=8)  # vLLM's default: context
    assert sent(fake)["max_output_tokens"] == 8
    assert "x-proxy-max-tokens-clipped" not in unset.headers
    # a cap the context is within leaves vLLM's own default alone (the answer unchanged)
    _, fake = await ask({"input": "hi"}, max_output_tokens=4096)
    assert "max_output_tokens" not in sent(fake)
    _, fake = await ask({"input": "hi", "max_output_tokens": 5}, max_output_tokens=8)
    assert sent(fake)["max_output_tokens"] == 5


async def test_greedy_is_forced_and_off_when_off() -> None:
    body = {"input": "hi", "temperature": 1.5, "top_p": 0.3, "top_k": 5}
    _, fake = await ask(body)
    upstream = sent(fake)
    assert (upstream["temperature"], upstream["top_p"], upstream["top_k"]) == (0.0, 1.0, -1)
    assert "n" not in upstream  # a ResponsesRequest has none
    _, fake = await ask(body, greedy=False)
    upstream = sent(fake)
    assert (upstream["temperature"], upstream["top_p"], upstream["top_k"]) == (1.5, 0.3, 5)


@pytest.mark.parametrize(("field", "value", "param", "kind"), [
    ("max_output_tokens", "many", "body.max_output_tokens", "Bad Request"),
    ("temperature", "hot", "body.temperature", "Bad Request"),
    ("top_k", 1.5, "body.top_k", "Bad Request"),
    ("stream", "maybe", "body.stream", "Bad Request"),
    ("model", 5, "body.model", "Bad Request"),
    ("temperature", 5, "temperature", "BadRequestError"),  # overwritten, yet vLLM's 400
    ("top_p", 0, "top_p", "BadRequestError"),
])
async def test_a_value_greedy_or_the_cap_would_overwrite_is_refused_as_vllm_does(
        field: str, value: Any, param: str, kind: str) -> None:
    got, fake = await ask({"input": "hi", field: value})
    assert got.status_code == 400, got.text
    err = got.json()["error"]
    assert (err["type"], err["param"], err["code"]) == (kind, param, 400)
    assert not fake.completions("/v1/responses")


async def test_lax_values_are_coerced_as_vllm_reads_them() -> None:
    got, fake = await ask({"input": "hi", "max_output_tokens": "3", "temperature": "1"},
                          max_output_tokens=8)
    assert got.status_code == 200
    assert sent(fake)["max_output_tokens"] == 3


async def test_an_unknown_model_is_vllms_404() -> None:
    got, _ = await ask({"model": "nope", "input": "hi"})
    assert got.status_code == 404
    assert got.json()["error"]["param"] == "model"


_ANY = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=6)
_FIELDS = ("model", "input", "max_output_tokens", "stream", "temperature", "top_p", "top_k",
           "request_id", "previous_response_id")


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(body=st.dictionaries(st.sampled_from(_FIELDS), _ANY, max_size=5))
def test_any_values_of_the_touched_fields_are_never_a_500(body: dict[str, Any]) -> None:
    async def run() -> None:
        got, _ = await ask({"input": "hi", **body})
        assert got.status_code < 500, got.text
        if got.status_code >= 400:
            assert set(got.json()["error"]) == {"message", "type", "param", "code"}
    asyncio.run(run())


@pytest.mark.parametrize("background", [True, "true", 1])
async def test_background_mode_is_refused_before_reaching_vllm(background: Any) -> None:
    # found by a review: `background: true` went to vLLM, which (with its response store on)
    # answers at once, "queued", and generates on past the admission slot and the key's limits
    got, fake = await ask({"input": "hi", "background": background})
    assert got.status_code == 400, got.text
    assert got.json()["error"]["param"] == "background"
    assert fake.completions("/v1/responses") == []
    ok, _ = await ask({"input": "hi", "background": False})
    assert ok.status_code == 200
