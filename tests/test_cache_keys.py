from __future__ import annotations

from typing import Any

from proxy.cache.keys import request_keys
from proxy.effective import uncacheable


def body(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "tiny", "temperature": 0, "max_tokens": 16,
                            "messages": [{"role": "system", "content": "Be terse."},
                                         {"role": "user", "content": "What is Redis?"}]}
    base.update(kw)
    return base


def keys(b: dict[str, Any], tenant: str = "", emb: str = "e1") -> Any:
    return request_keys("chat", b, tenant, emb)


def test_question_is_the_last_user_message_and_context_is_in_the_partition() -> None:
    k = keys(body())
    assert k.text == "What is Redis?"
    other_system = body(messages=[{"role": "system", "content": "Be verbose."},
                                  {"role": "user", "content": "What is Redis?"}])
    assert keys(other_system).partition != k.partition


def test_partition_splits_on_everything_that_changes_the_answer() -> None:
    k = keys(body())
    assert keys(body(), tenant="B").partition != k.partition
    assert keys(body(model="other")).partition != k.partition
    assert keys(body(), emb="e2").partition != k.partition
    assert keys(body(tools=[{"type": "function"}])).partition != k.partition
    assert keys(body(response_format={"type": "json_object"})).partition != k.partition
    assert keys(body(stop=["\n"])).partition != k.partition
    # a field the proxy does not understand is not keyed: the request bypasses the cache
    assert uncacheable("chat", body(some_future_field=1)) == "unknown_field"
    assert request_keys("completions", {"model": "tiny", "prompt": "What is Redis?"}, "",
                        "e1").partition != k.partition


def test_stream_and_max_tokens_share_the_exact_key() -> None:
    k = keys(body())
    same = keys(body(stream=True, stream_options={"include_usage": True}, max_tokens=99))
    assert (same.partition, same.exact) == (k.partition, k.exact)
    assert same.max_tokens == 99


def test_exact_key_depends_on_the_question() -> None:
    other = body(messages=[{"role": "user", "content": "What is Redis??"}])
    assert keys(other).exact != keys(body()).exact


def test_semantic_text_skipped_for_non_user_last_turn_and_images() -> None:
    assistant_last = body(messages=[{"role": "user", "content": "hi"},
                                    {"role": "assistant", "content": "hello"}])
    assert keys(assistant_last).text is None
    image = body(messages=[{"role": "user", "content": [
        {"type": "text", "text": "what is this"}, {"type": "image_url", "image_url": {}}]}])
    assert keys(image).text is None
    parts = body(messages=[{"role": "user", "content": [{"type": "text", "text": "a"},
                                                        {"type": "text", "text": "b"}]}])
    assert keys(parts).text == "a\nb"  # as vLLM joins them for a string template


def test_text_parts_never_share_an_answer_with_the_joined_string() -> None:
    # found by a review: [cat, dog] was a semantic HIT (identical text, no judge) on the answer
    # to "catdog"; vLLM's prompt is "cat\ndog". Parts share only with the same number of parts
    one = keys(body(messages=[{"role": "user", "content": "catdog"}]))
    two = keys(body(messages=[{"role": "user", "content": [
        {"type": "text", "text": "cat"}, {"type": "text", "text": "dog"}]}]))
    assert two.text == "cat\ndog" != one.text and two.partition != one.partition
    joined = keys(body(messages=[{"role": "user", "content": "cat\ndog"}]))
    assert joined.partition != two.partition  # a template may render parts apart
    again = keys(body(messages=[{"role": "user", "content": [
        {"type": "text", "text": "cat"}, {"type": "text", "text": "dog"}]}], max_tokens=5))
    assert (again.partition, again.exact) == (two.partition, two.exact)
    assert keys(body()).partition == keys(body(max_tokens=3)).partition  # strings unchanged


def test_completions_prompt_text() -> None:
    k = request_keys("completions", {"model": "m", "prompt": ["Once upon"], "temperature": 0},
                     "", "e")
    assert k.text == "Once upon"
    ids = request_keys("completions", {"model": "m", "prompt": [1, 2, 3]}, "", "e")
    assert ids.text is None


def test_cacheable_only_greedy_single_choice_without_logprobs() -> None:
    assert uncacheable("chat", body()) is None
    assert uncacheable("chat", body(temperature=0.7)) == "not_greedy"
    assert uncacheable("chat", body(n=2)) == "n"
    assert uncacheable("chat", body(logprobs=True)) == "logprobs"
    assert uncacheable("chat", {"model": "m"}) == "not_greedy"
