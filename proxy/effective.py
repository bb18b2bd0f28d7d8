"""The request vLLM will actually run: which length field it reads, and which fields the proxy
understands well enough to cache on.

One place for the rules that policy (the output cap), the cache key and the cache's bypass
decision all need, read off vLLM 0.32's own protocol models
(`vllm/entrypoints/openai/{chat_completion,completion}/protocol.py`):

- chat: `max_completion_tokens` when it is not null, else `max_tokens` (serving.py);
- completions: only `max_tokens` (`max_completion_tokens` is not a field there: vLLM ignores
  it), null meaning the default (16).

Fields are an allow-list: NEUTRAL ones never change the greedy answer's text (or are handled by
the cache entry itself), KEYED ones may and go into the cache key as sent, BYPASS ones change
what the answer holds in ways a replay cannot reproduce. Any field in none of the three is not
understood, and the request bypasses the cache: an unknown field can cost a hit, never serve a
wrong answer. tests/test_effective.py checks every listed field exists in vLLM's models.
"""

from __future__ import annotations

from typing import Any

from proxy.types import Kind

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # vLLM's CompletionRequest.max_tokens default

NEUTRAL: dict[Kind, frozenset[str]] = {
    "chat": frozenset({"model", "messages", "stream", "stream_options", "user", "n", "priority",
                       "request_id", "session_id", "stream_interval",
                       "max_tokens", "max_completion_tokens"}),
    "completions": frozenset({"model", "prompt", "stream", "stream_options", "user", "n",
                              "priority", "request_id", "session_id", "stream_interval",
                              "max_tokens"}),
}
_KEYED_BOTH = frozenset({
    "temperature", "top_p", "top_k", "min_p", "seed", "stop", "stop_token_ids",
    "include_stop_str_in_output", "ignore_eos", "min_tokens", "presence_penalty",
    "frequency_penalty", "repetition_penalty", "length_penalty", "logit_bias", "bad_words",
    "allowed_token_ids", "skip_special_tokens", "spaces_between_special_tokens",
    "response_format", "structured_outputs", "add_special_tokens", "truncate_prompt_tokens",
    "truncation_side", "return_token_ids", "return_tokens_as_token_ids",
    "return_token_offsets", "thinking_token_budget",
    # not the answer but who may share it: vLLM shares its prefix cache only among requests of
    # one salt, so that one user cannot learn what another asked; a HIT would tell them more
    "cache_salt"})
KEYED: dict[Kind, frozenset[str]] = {
    "chat": _KEYED_BOTH | {"tools", "tool_choice", "parallel_tool_calls", "chat_template",
                           "chat_template_kwargs", "add_generation_prompt",
                           "continue_final_message", "documents", "reasoning_effort",
                           "include_reasoning", "return_prompt_text"},
    "completions": _KEYED_BOTH | {"suffix"},
}
# KEYED fields whose vLLM default is None: null asks for what leaving the field out asks for,
# so it is left out of the key too (`"cache_salt": null` was another partition than no salt: a
# lost hit). Where the default is something else (`stop: []`, `skip_special_tokens: true`) null
# stays as sent: a miss at worst. tests/test_effective.py checks both lists against vLLM's models.
_NULL_BOTH = frozenset({
    "allowed_token_ids", "cache_salt", "frequency_penalty", "logit_bias", "min_p",
    "presence_penalty", "repetition_penalty", "response_format", "return_token_ids",
    "return_tokens_as_token_ids", "seed", "structured_outputs", "temperature",
    "thinking_token_budget", "top_k", "top_p", "truncate_prompt_tokens", "truncation_side"})
NULL_IS_ABSENT: dict[Kind, frozenset[str]] = {
    "chat": _NULL_BOTH | {"chat_template", "chat_template_kwargs", "documents",
                          "reasoning_effort", "return_prompt_text", "tools"},
    "completions": _NULL_BOTH | {"suffix"},
}
# Understood, but the answer then carries what a replay cannot reproduce (logprobs, beam
# search, transfer parameters, multimodal payloads): never cached.
BYPASS = frozenset({"echo", "logprobs", "top_logprobs", "prompt_logprobs", "logprob_token_ids",
                    "use_beam_search", "kv_transfer_params", "ec_transfer_params",
                    "mm_payload", "prompt_embeds", "mm_processor_kwargs", "media_io_kwargs",
                    "return_mm_kwargs", "vllm_xargs", "repetition_detection", "watermarking",
                    "routed_experts_prompt_start"})
# BYPASS fields that are counts, for which 0 still asks for something (vLLM tests `is not None`)
_COUNTS: dict[Kind, frozenset[str]] = {"chat": frozenset({"prompt_logprobs"}),
                                       "completions": frozenset({"logprobs", "prompt_logprobs"})}


def length_field(kind: Kind, body: dict[str, Any]) -> str:
    """The field vLLM reads the output length from, for this body."""
    if kind == "chat" and body.get("max_completion_tokens") is not None:
        return "max_completion_tokens"
    return "max_tokens"


def output_tokens(kind: Kind, body: dict[str, Any]) -> int | None:
    """The output limit vLLM will apply; None = as much as the context leaves (chat only)."""
    value = body.get(length_field(kind, body))
    if value is None:
        return COMPLETIONS_DEFAULT_MAX_TOKENS if kind == "completions" else None
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def not_understood(kind: Kind, body: dict[str, Any]) -> list[str]:
    known = NEUTRAL[kind] | KEYED[kind]
    return sorted(k for k in body if k not in known and k not in BYPASS)


def echo_only(kind: Kind, body: dict[str, Any]) -> bool:
    """Completions with echo and max_tokens 0: vLLM returns the prompt alone (it runs 1 token),
    so 0 is a valid length there."""
    return kind == "completions" and body.get("echo") is True and body.get("max_tokens") == 0


def uncacheable(kind: Kind, body: dict[str, Any]) -> str | None:
    """None when the request may use the cache, else the reason it may not."""
    if body.get("n", 1) not in (1, None):
        return "n"
    if body.get("temperature", 1.0) not in (0, 0.0):
        return "not_greedy"
    if body.get("use_beam_search"):
        return "beam_search"
    for field in sorted(BYPASS):
        value = body.get(field)
        # 0 is "on" where the field counts logprobs: completions' `logprobs: 0` and
        # `prompt_logprobs: 0` return each token's own (found by a review: they shared the
        # plain request's entry and got its answer without them)
        on = value is not None if field in _COUNTS[kind] else value not in (None, False, 0)
        if on:
            return "logprobs" if "logprob" in field or field == "echo" else "field"
    if not_understood(kind, body):
        return "unknown_field"
    interval = body.get("stream_interval")
    if body.get("stream") is True and isinstance(interval, int) and interval > 1:
        # chunks of N tokens (vLLM raises the server's --stream-interval to it): a stored
        # stream replays the chunks it was stored with, and one stored from it is not one
        # chunk a token; JSON answers ignore it (vLLM: "ignored for non-streaming requests")
        return "stream_interval"
    if kind == "chat" and _fetched_media(body.get("messages")):
        return "remote_media"
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True \
            and options.get("continuous_usage_stats") is True:
        return "continuous_usage"  # usage on every chunk: a stored stream has it on none
    if output_tokens(kind, body) is None and body.get(length_field(kind, body)) is not None:
        return "length"  # a length vLLM would reject or coerce: let it answer
    return None


# Content parts whose media vLLM fetches by URL (renderers/chat_utils.py's MM_PARSER_MAP): the
# value is {"url": ...}, or the URL itself for the Responses-style input_image.
_MEDIA_PARTS = ("image_url", "audio_url", "video_url", "input_image")


def _fetched_media(messages: Any) -> bool:
    """Whether a message names media by a URL vLLM loads (http(s), file): what it holds can
    change while the URL stays, so an answer keyed by the URL could describe another picture.
    A data: URL carries its content and keys by it."""
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            for field in _MEDIA_PARTS if isinstance(part, dict) else ():
                media = part.get(field)
                url = media.get("url") if isinstance(media, dict) else media
                if isinstance(url, str) and url[:5].lower() != "data:":
                    return True
    return False


def prompt_in_answer(body: dict[str, Any]) -> bool:
    """Whether the answer carries the request's own prompt (`prompt_token_ids`, chat's
    `prompt_text`): only the same prompt may share it, never a semantic hit's other question."""
    return bool(body.get("return_token_ids")) or bool(body.get("return_prompt_text"))


def keyed_fields(kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
    """What goes into the cache's partition besides model, question and context."""
    return {k: v for k, v in body.items()
            if k in KEYED[kind] and not (v is None and k in NULL_IS_ABSENT[kind])}
