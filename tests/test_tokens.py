import pytest

from proxy.balancer import Balancer
from proxy.metrics import Metrics
from proxy.settings import Settings
from proxy.tokens import AutoCounter, RemoteCounter, conversation, load_local
from proxy.upstream import Upstream, make_transport

pytestmark = pytest.mark.vllm

CHATS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "héllo wörld 🙂"},
     {"role": "assistant", "content": "x = 1 * 2"}, {"role": "user", "content": "again?"}],
    [{"role": "user", "content": [{"type": "text", "text": "parts"}]}],
    # tool-call history: null content and JSON-string arguments, as OpenAI clients send it
    [{"role": "user", "content": "weather in Oslo?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "c1", "type": "function",
          "function": {"name": "get", "arguments": '{"city": "Oslo"}'}}]},
     {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
]
TEXTS = ["hi", "the river and the mountain " * 20, "ünïcödé 🙂 {\"json\": true}"]


def upstream(vllm) -> Upstream:
    transport = make_transport(Settings(upstreams=(vllm.url,)))
    return Upstream(transport, Balancer((vllm.url,), 1.0), Metrics())


def remote(vllm) -> RemoteCounter:
    return RemoteCounter(upstream(vllm).fetch)


async def test_local_counts_equal_vllms(vllm):
    local, far = load_local(str(vllm.model_dir)), remote(vllm)
    for msgs in CHATS:
        assert await local.count_chat("tiny", msgs) == await far.count_chat("tiny", msgs)
    for text in TEXTS:
        assert await local.count_text("tiny", text) == await far.count_text("tiny", text)


async def test_tail_keeps_the_last_tokens(vllm):
    local, far = load_local(str(vllm.model_dir)), remote(vllm)
    text = TEXTS[1]
    for counter in (local, far):
        cut = await counter.tail("tiny", text, 10)
        assert text.endswith(cut) and 8 <= await local.count_text("tiny", cut) <= 10


async def test_auto_counter_discovers_the_local_tokenizer(vllm, tmp_path):
    auto = AutoCounter(upstream(vllm).fetch, None)
    await auto.discover(str(tmp_path / "missing"))
    assert auto.source == "remote" and auto.count_sync() is None
    await auto.discover(str(vllm.model_dir))
    assert auto.source == "local"
    count = auto.count_sync()
    assert count is not None and count("hi there") == await auto.count_text("tiny", "hi there") == 3


async def test_local_and_remote_ids_agree_and_count_the_same(vllm):
    local, far = load_local(str(vllm.model_dir)), remote(vllm)
    for msgs in CHATS:
        ids = await local.encode_chat("tiny", msgs)
        assert ids == await far.encode_chat("tiny", msgs)
        assert len(ids) == await local.count_chat("tiny", msgs)
    for text in TEXTS:
        assert await local.encode_text("tiny", text) == await far.encode_text("tiny", text)


def test_the_conversation_is_what_vllm_hands_the_template():
    history = [{"role": "user", "content": "weather?"},
               {"role": "assistant", "content": None, "tool_calls": [
                   {"id": "c1", "type": "function",
                    "function": {"name": "get", "arguments": '{"city": "Oslo"}'}},
                   {"id": "c2", "type": "function", "function": {"name": "x", "arguments": "{"}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
               {"role": "assistant", "tool_calls": []}]
    out = conversation(history)
    assert out[1]["content"] == "" and out[3]["content"] == ""
    assert [c["function"]["arguments"] for c in out[1]["tool_calls"]] == [{"city": "Oslo"}, {}]
    assert "tool_calls" not in out[3]
    assert history[1]["content"] is None  # the request itself is left as sent
