import httpx
import pytest

from proxy.clip import clip_chat, clip_prompt
from proxy.errors import InputTooLong
from proxy.settings import Settings
from tests.support.proxy_app import proxy_client


class WordCounter:
    """One token per word, one more per message (a stand-in for a chat template)."""

    async def count_chat(self, model, messages, tools=None):
        return sum(1 + len(str(m.get("content") or "").split()) for m in messages)

    async def count_text(self, model, text):
        return len(text.split())

    async def tail(self, model, text, n_tokens):
        return " ".join(text.split()[-n_tokens:]) if n_tokens > 0 else ""


W = WordCounter()
SYS = {"role": "system", "content": "be kind"}  # 3


def turns(*texts):
    roles = ["user", "assistant"]
    return [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]


async def test_within_the_limit_nothing_changes():
    body = {"messages": [SYS, *turns("a b")]}
    out = await clip_chat(body, W, "m", 6, truncate=False)
    assert out.body is body and out.input_tokens == 6 and not out.truncated


async def test_reject_says_sent_and_allowed():
    with pytest.raises(InputTooLong, match=r"7 input tokens.*at most 6"):
        await clip_chat({"messages": [SYS, *turns("a b c")]}, W, "m", 6, truncate=False)


async def test_truncate_keeps_system_and_newest_turns_starting_at_a_user_turn():
    msgs = [SYS, *turns("one two", "three four", "five six", "seven")]  # 3+3+3+3+2
    out = await clip_chat({"messages": msgs}, W, "m", 9, truncate=True)
    # dropping 2 turns fits (3+3+2=8) and the kept conversation starts at a user turn
    assert out.body["messages"] == [SYS, msgs[3], msgs[4]]
    assert (out.dropped, out.trimmed, out.input_tokens, out.original_tokens) == (2, False, 8, 14)
    assert "dropped_messages=2" in out.header()
    # 7 tokens: the user turn alone would leave an assistant turn first; it is dropped too
    out = await clip_chat({"messages": msgs}, W, "m", 7, truncate=True)
    assert out.body["messages"] == [SYS, msgs[4]]


async def test_truncate_trims_the_newest_turn_when_alone_it_is_too_long():
    msgs = [SYS, *turns("old", "older", "w1 w2 w3 w4 w5 w6 w7 w8")]
    out = await clip_chat({"messages": msgs}, W, "m", 8, truncate=True)
    assert out.body["messages"][0] == SYS
    assert out.body["messages"][-1]["content"].endswith("w7 w8")
    assert out.trimmed and out.input_tokens <= 8


async def test_truncate_cannot_drop_the_system_prompt():
    big = {"role": "system", "content": "s " * 20}
    with pytest.raises(InputTooLong):
        await clip_chat({"messages": [big, *turns("hi")]}, W, "m", 10, truncate=True)


async def test_prompts_keep_their_end():
    out = await clip_prompt({"prompt": "a b c d e"}, W, "m", 3, truncate=True)
    assert out.body["prompt"] == "c d e" and out.trimmed
    out = await clip_prompt({"prompt": [1, 2, 3, 4]}, W, "m", 2, truncate=True)
    assert out.body["prompt"] == [3, 4]
    out = await clip_prompt({"prompt": ["a b c", "d"]}, W, "m", 2, truncate=True)
    assert out.body["prompt"] == ["b c", "d"] and out.input_tokens == 2
    with pytest.raises(InputTooLong) as info:
        await clip_prompt({"prompt": "a b c"}, W, "m", 2, truncate=False)
    assert info.value.param == "prompt"


LONG = " ".join(f"word{i} river mountain" for i in range(150))


@pytest.mark.vllm
async def test_real_reject_counts_like_vllm(vllm):
    msgs = [{"role": "user", "content": LONG}]
    async with httpx.AsyncClient() as direct:
        sent = (await direct.post(vllm.url + "/tokenize",
                                  json={"model": "tiny", "messages": msgs})).json()
    s = Settings(upstreams=(vllm.url,), cache="off", max_input_tokens=100)
    async with proxy_client(s) as c:
        r = await c.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs})
    assert r.status_code == 400
    assert f"has {sent['count']} input tokens" in r.json()["error"]["message"]


@pytest.mark.vllm
async def test_real_truncate_fits_vllms_own_count(vllm):
    msgs = [{"role": "system", "content": "answer briefly"},
            {"role": "user", "content": LONG}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": LONG + " last"}]
    s = Settings(upstreams=(vllm.url,), cache="off", max_input_tokens=120,
                 input_overflow="truncate")
    async with proxy_client(s) as c:
        r = await c.post("/v1/chat/completions", json={"model": "tiny", "messages": msgs,
                                                       "max_tokens": 2}, timeout=60)
    assert r.status_code == 200, r.text
    assert 100 < r.json()["usage"]["prompt_tokens"] <= 120  # vLLM's count, not ours
    assert "dropped_messages=2; trimmed=yes" in r.headers["x-proxy-input-truncated"]


class WordEncoder(WordCounter):
    async def encode_chat(self, model, messages, tools=None):
        out = []
        for m in messages:
            out += [0, *(len(w) for w in str(m.get("content") or "").split())]
        return out

    async def encode_text(self, model, text):
        return [len(w) for w in text.split()]


async def test_ids_come_with_the_count_when_asked():
    body = {"messages": [SYS, *turns("a bb")]}
    out = await clip_chat(body, WordEncoder(), "m", 10, truncate=False, ids=True)
    assert out.token_ids == [0, 2, 4, 0, 1, 2] and out.input_tokens == 6
    assert (await clip_chat(body, WordEncoder(), "m", 10, truncate=False)).token_ids is None
    assert (await clip_chat(body, W, "m", 10, truncate=False, ids=True)).token_ids is None
    cut = await clip_chat({"messages": [SYS, *turns("a b c", "x", "y z")]}, WordEncoder(), "m",
                          7, truncate=True, ids=True)
    assert cut.truncated and cut.token_ids == [0, 2, 4, 0, 1, 1]  # system + the newest turn
    text = await clip_prompt({"prompt": "aa b"}, WordEncoder(), "m", 10, False, ids=True)
    assert text.token_ids == [2, 1]
    listed = await clip_prompt({"prompt": [[5, 6], [7]]}, W, "m", 10, False, ids=True)
    assert listed.token_ids == [5, 6]


@pytest.mark.vllm
async def test_a_prompt_past_the_context_is_answered_as_vllm_answers_it(vllm):
    # the same over-long prompts to vLLM and through the proxy: the same status and error body
    # (the proxy answered its own context_length_exceeded); and one that fills the context
    # exactly, which vLLM takes and then refuses its output length of 0
    async with httpx.AsyncClient(base_url=vllm.url, timeout=300) as direct:
        ctx = (await direct.get("/v1/models")).json()["data"][0]["max_model_len"]
        chat = [{"role": "user", "content": "w " * ctx}]
        over = (await direct.post("/tokenize", json={"model": "tiny", "messages": chat}))
        fill = [{"role": "user", "content": "w " * (2 * ctx - over.json()["count"])}]
        chats = [{"messages": chat}, {"messages": chat, "max_tokens": 10, "stream": True},
                 {"messages": fill}]
        prompts = [{"prompt": "w " * ctx}, {"prompt": [5] * (ctx + 1)},
                   {"prompt": [5] * (ctx + 9), "stream": True}, {"prompt": [5] * ctx},
                   {"prompt": [[5] * 10, [5] * ctx, [5] * (ctx + 5)]}]
        asks = [("/v1/chat/completions", b) for b in chats] + \
            [("/v1/completions", b) for b in prompts]
        s = Settings(upstreams=(vllm.url,), cache="off")
        async with proxy_client(s) as proxied:
            for path, body in asks:
                body = {"model": "tiny", **body}
                want = await direct.post(path, json=body)
                got = await proxied.post(path, json=body, timeout=300)
                assert want.status_code == 400, (path, want.text)
                assert (got.status_code, got.json()) == (400, want.json()), path
