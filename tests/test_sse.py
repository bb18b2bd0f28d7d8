import orjson

from proxy.sse import DONE, Accumulator, replay

ANSWER = {"id": "x", "object": "chat.completion", "created": 1, "model": "tiny",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello big world"},
                       "logprobs": None, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}}


def parse(events):
    events = list(events)
    assert events[-1] == DONE
    return [orjson.loads(e[6:]) for e in events[:-1]]


def vllm_stream(pieces: tuple[str, ...]) -> list[dict[str, object]]:
    """vLLM's chat chunks for ANSWER, one a token (without id/created), usage last."""
    head = {"object": "chat.completion.chunk", "model": "tiny"}
    out: list[dict[str, object]] = [{**head, "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
         "finish_reason": None}], "prompt_token_ids": None}]
    for n, p in enumerate(pieces):
        last = n == len(pieces) - 1
        choice = {"index": 0, "delta": {"content": p}, "logprobs": None,
                  "finish_reason": "stop" if last else None, "token_ids": None}
        if last:
            choice["stop_reason"] = None
        out.append({**head, "choices": [choice]})
    return [*out, {**head, "choices": [], "usage": ANSWER["usage"], "system_fingerprint": None}]


def test_chat_replay_is_a_valid_stream_that_folds_back():
    chunks = parse(replay("chat", True, vllm_stream(("Hello", " big", " world"))))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1] == {**chunks[-1], "choices": [], "usage": ANSWER["usage"]}
    acc = Accumulator("chat")
    for c in chunks:
        acc.add(c)
    done = acc.completion()
    assert done is not None
    choice, original = done.body["choices"][0], ANSWER["choices"][0]
    assert choice["message"]["content"] == original["message"]["content"]
    assert choice["finish_reason"] == original["finish_reason"]
    # folded as vLLM shapes a non-streaming answer: its null fields included
    assert choice["stop_reason"] is None and choice["message"]["refusal"] is None
    assert {k: done.body["usage"][k] for k in ANSWER["usage"]} == ANSWER["usage"]
    assert len(done.pieces or ()) == 3
    assert done.events is not None and len(orjson.loads(done.events)) == len(chunks)
    assert all("id" not in e and "created" not in e for e in orjson.loads(done.events))


def test_a_streamed_replay_is_the_stored_stream():
    events = ({"object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop", "stop_reason": None}]},
              {"object": "chat.completion.chunk", "model": "m", "choices": [],
               "usage": {"completion_tokens": 1}, "system_fingerprint": "fp"})
    with_usage = parse(replay("chat", True, list(events)))
    assert [{k: v for k, v in c.items() if k not in ("id", "created")}
            for c in with_usage] == list(events)
    assert len({c["id"] for c in with_usage}) == 1
    without = parse(replay("chat", False, list(events)))
    assert len(without) == 1 and without[0]["system_fingerprint"] == "fp"


def test_accumulator_refuses_incomplete_or_failed_streams():
    acc = Accumulator("chat")
    acc.add({"id": "1", "choices": [{"index": 0, "delta": {"content": "hi"},
                                     "finish_reason": None}]})
    assert acc.completion() is None  # no finish_reason yet
    acc.add({"error": {"message": "boom"}})
    acc.add({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    assert acc.completion() is None
    tools = Accumulator("chat")
    tools.add({"choices": [{"index": 0, "delta": {"tool_calls": [{}]}, "finish_reason": "stop"}]})
    assert tools.completion() is None


def test_a_stored_stream_is_one_object_for_the_garbage_collector():
    import gc

    acc = Accumulator("chat")
    for i in range(50):
        acc.add_raw(orjson.dumps({"id": "x", "created": 1, "object": "chat.completion.chunk",
                                  "choices": [{"index": 0, "delta": {"content": f" w{i}"},
                                               "finish_reason": "length" if i == 49 else None}]}))
    done = acc.completion()
    assert done is not None and isinstance(done.events, bytes)
    assert not gc.is_tracked(done.events) and len(orjson.loads(done.events)) == 50
