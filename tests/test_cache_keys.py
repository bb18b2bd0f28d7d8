from __future__ import annotations

from typing import Any, cast

import pytest

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


# Key order (keys.py): kept as sent wherever vLLM may see it, sorted where it never does.
def _schema(*names: str) -> dict[str, Any]:
    return {"type": "object", "properties": {n: {"type": "string"} for n in names},
            "required": sorted(names)}


def _tool(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": "book", "parameters": schema}}


AB, BA = _schema("city", "date"), _schema("date", "city")
# each field that can carry an object whose key order reaches the prompt or the grammar
ORDERED: dict[str, tuple[Any, Any]] = {
    "tools": ([_tool(AB)], [_tool(BA)]),
    "response_format": ({"type": "json_schema", "json_schema": {"name": "b", "schema": AB}},
                        {"type": "json_schema", "json_schema": {"name": "b", "schema": BA}}),
    "structured_outputs": ({"json": AB}, {"json": BA}),
    "chat_template_kwargs": ({"profile": {"city": "Oslo", "date": "today"}},
                             {"profile": {"date": "today", "city": "Oslo"}}),
    "documents": ([{"title": "t", "text": "x"}], [{"text": "x", "title": "t"}]),
}


@pytest.mark.parametrize("field", sorted(ORDERED))
def test_an_objects_key_order_that_reaches_vllm_splits_the_key(field: str) -> None:
    # keys were hashed with every object's keys sorted (format v2), so a second request whose
    # tool or response_format schema listed the same properties in another order (another
    # prompt, another grammar: another greedy answer) was an exact HIT on the first one's answer
    one, two = (keys(body(**{field: value})) for value in ORDERED[field])
    assert one.partition != two.partition and one.exact != two.exact
    again = keys(body(**{field: ORDERED[field][0]}))
    assert (again.partition, again.exact) == (one.partition, one.exact)


def test_a_completions_schema_order_splits_the_key_too() -> None:
    def completion(schema: dict[str, Any]) -> Any:
        return request_keys("completions", {
            "model": "tiny", "prompt": "Book it", "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "b",
                                                                       "schema": schema}}},
            "", "e1")
    assert completion(AB).exact != completion(BA).exact


def test_order_vllm_never_sees_still_shares_the_key() -> None:
    # the body's own fields: read by name into vLLM's request model
    first = body(tools=[_tool(AB)], response_format={"type": "json_object"}, seed=1)
    k = keys(first)
    backwards = dict(reversed(list(first.items())))
    assert list(backwards) != list(first)
    assert (keys(backwards).partition, keys(backwards).exact) == (k.partition, k.exact)
    # a message's own keys (vLLM builds the template's dict itself), earlier turns and the last
    swapped = body(tools=[_tool(AB)], response_format={"type": "json_object"}, seed=1,
                   messages=[{"content": "Be terse.", "role": "system"},
                             {"content": "What is Redis?", "role": "user"}])
    same = keys(swapped)
    assert (same.partition, same.exact, same.text) == (k.partition, k.exact, "What is Redis?")
    # logit_bias: a bias per token id
    bias = keys(body(logit_bias={"11": 5, "7": -100}))
    assert keys(body(logit_bias={"7": -100, "11": 5})).partition == bias.partition
    assert keys(body(logit_bias={"7": -100})).partition != bias.partition


def test_logit_bias_naming_one_token_twice_keeps_its_order() -> None:
    # vLLM reads int("01") == int("1") == 1 and keeps the later bias
    up, down = ({"1": 5, "01": -5}, {"01": -5, "1": 5})
    assert keys(body(logit_bias=up)).partition != keys(body(logit_bias=down)).partition


def test_the_format_is_in_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    # the embedded store's snapshot carries no format: a v2 entry loaded after the upgrade must
    # not be found (its keys hashed schemas sorted), nor any later format's
    k = keys(body(tools=[_tool(AB)]))
    monkeypatch.setattr("proxy.cache.keys.REDIS_FORMAT", "v0")
    other = keys(body(tools=[_tool(AB)]))
    assert other.partition != k.partition and other.exact != k.exact


def test_vllm_renders_and_constrains_the_two_orders_differently() -> None:
    """What the keys above stand on, with vLLM's own request model: the tool dicts it hands the
    chat template keep the schema's order, and so does the grammar it compiles for a
    response_format; when this fails the order no longer matters and may be sorted again."""
    import xgrammar
    from transformers.utils.chat_template_utils import render_jinja_template
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.v1.structured_output.request import get_structured_output_key

    prompts, grammars = set(), set()
    for schema in (AB, BA):
        rf = ORDERED["response_format"][0 if schema is AB else 1]
        req = ChatCompletionRequest.model_validate(body(tools=[_tool(schema)],
                                                        response_format=rf))
        tools: list[Any] = [tool.model_dump() for tool in req.tools or []]  # as vLLM does
        # (the rendered chats, generation indices), whatever its annotation says
        out: Any = render_jinja_template([cast(Any, req.messages)], tools=tools,
                                         chat_template="{{ tools | tojson }}")
        prompts.add(out[0][0])
        params = req.to_sampling_params(16, {}).structured_outputs
        assert params is not None
        _, spec = get_structured_output_key(params)
        grammars.add(str(xgrammar.Grammar.from_json_schema(spec)))
    assert len(prompts) == 2 and len(grammars) == 2
