"""The proxy's policy on `POST /v1/responses` (vLLM's Responses API), so that this route is no
way around the caps the chat route has: forced greedy sampling and the output cap, on the
fields vLLM's ResponsesRequest reads (`max_output_tokens`, not `max_tokens`).

The fields the proxy overwrites are first checked as vLLM checks them (pydantic's lax typing,
then SamplingParams' ranges), so a value vLLM refuses is refused here too, with vLLM's error,
and not hidden by the overwrite. Every other field is vLLM's to check: it gets the body as the
client sent it. No input clipping here (README: the Responses API): `input` is a list of typed
items (messages, tool calls and their outputs, images), not a chat to drop turns from.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from proxy import params
from proxy.errors import BadRequest, validation_error

# policy.GREEDY without `n`: a ResponsesRequest has no `n` (always one output) nor `best_of`
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1}


class _Touched(BaseModel):
    """The fields of vLLM's ResponsesRequest that the proxy reads or overwrites, in its order
    (the first error names the `param`) and with its types."""
    model_config = ConfigDict(extra="ignore")
    background: bool | None = False
    max_output_tokens: int | None = None
    model: str | None = None
    previous_response_id: str | None = None  # these two are tagged (proxy/response_ids.py)
    stream: bool | None = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    request_id: str = ""  # unset: one is made as vLLM makes it; null is vLLM's 400 too


def check(body: dict[str, Any]) -> None:
    """Raise what vLLM answers for a bad value of a field the proxy touches; else write the
    coerced values back (`"max_output_tokens": "5"` is 5 for vLLM too)."""
    try:
        parsed = _Touched.model_validate(body, from_attributes=True)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise validation_error([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
    coerced = parsed.model_dump(exclude_unset=True)
    body.update(coerced)
    params.check_ranges(coerced)
    if parsed.background:
        # vLLM (with VLLM_ENABLE_RESPONSES_API_STORE=1) answers at once, status "queued", and
        # generates on with no usage to charge: past the admission slot, the key's concurrency
        # and tpm, for an answer only GET /v1/responses/{id} gives, which the proxy does not
        # serve (found by a review). Without the store vLLM refuses it too (param background).
        raise BadRequest("background mode is not served by this proxy: the answer is generated "
                         "while the request is held (send it without `background`)",
                         param="background")


def cap(asked: Any, limit: int, context_len: int | None) -> tuple[int | None, bool]:
    """The `max_output_tokens` to send and whether the client's was lowered. vLLM runs
    min(max_output_tokens, what the context leaves): unset, it is set to the limit only when
    the limit is below the context (else vLLM's own default is within it, and unchanged)."""
    if asked is None:
        return (limit if context_len is None or limit < context_len else None), False
    if isinstance(asked, int) and not isinstance(asked, bool) and asked > limit:
        return limit, True
    return asked, False


def shape(body: dict[str, Any], greedy: bool, max_output: int,
          context_len: int | None) -> tuple[dict[str, Any], int | None, int]:
    """The body (check()ed) sent upstream, what the client asked for when its output was
    capped (else None), and the cap."""
    limit = max_output if context_len is None else min(max_output, context_len)
    asked = body.get("max_output_tokens")
    out = {**body, **GREEDY} if greedy else dict(body)
    given, lowered = cap(asked, limit, context_len)
    if given is not None:
        out["max_output_tokens"] = given
    return out, (asked if lowered else None), limit


_TEXT_KEYS = ("text", "content", "output", "arguments")  # an item's words (not an image's data)


def input_text(body: dict[str, Any]) -> str:
    """The words of the instructions and the input items, to count the tokens a key is charged
    before the call (vLLM's usage, with the chat template's, settles it after)."""
    words: list[str] = []

    def walk(value: object) -> None:
        if isinstance(value, str):
            words.append(value)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for key in _TEXT_KEYS:
                walk(value.get(key))

    walk(body.get("instructions"))
    walk(body.get("input"))
    return "\n".join(words)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def usage_of(response: object) -> tuple[int | None, int | None]:
    """(input_tokens, output_tokens) of a Responses object, as vLLM reports them."""
    usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None, None
    return _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))


def usage(content: bytes) -> tuple[int | None, int | None]:
    """The same, from an answer's JSON (none from one that is not JSON: relayed as is)."""
    try:
        return usage_of(orjson.loads(content))
    except orjson.JSONDecodeError:
        return None, None
