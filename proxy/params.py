"""A request body checked as vLLM 0.32 checks it, so the proxy rejects what vLLM rejects, with
vLLM's status, type, code and param, and accepts what it accepts (even when forced greedy
decoding overwrites the value).

The stages, in vLLM's order: its model's before-validators on the raw body; pydantic's lax
typing of the request, `messages` and `prompt` included (`max_tokens: "5"` is 5, `stream: 1` is
true, `prompt: [true]` is token 1; errors are `type: "Bad Request"`, `param: "body.<field>"`);
what rendering refuses (openai.validate: no messages, no prompt); then SamplingParams' range
checks (`type: "BadRequestError"`); last, an empty prompt in a batch. The coerced values are
written back into the body.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Required

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from typing_extensions import TypedDict

from proxy import effective, openai
from proxy.errors import VllmTypeError, VllmValueError, validation_error
from proxy.types import Kind

__all__ = ["VllmTypeError", "VllmValueError", "check", "check_ranges"]

_INT64 = 2**63
_UINT64 = 2**64  # what vLLM's engine messages carry (msgpack)


class _StreamOptions(BaseModel):  # vLLM's StreamOptions: lax bools ("yes", 1 -> True)
    model_config = ConfigDict(extra="allow")
    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


# vLLM types `messages` as a union of eight message shapes and reports a message no shape takes
# under the first one's name (`param`: "body.messages.0.ChatCompletionDeveloperMessageParam.
# role"): that one is copied (openai's types), the others are summed up by vLLM's last resort,
# any string role with content that is text, iterable or absent (content parts are checked
# later, as vLLM checks them: openai.validate).
class ChatCompletionContentPartTextParam(TypedDict):
    text: Required[str]
    type: Required[Literal["text"]]


class ChatCompletionDeveloperMessageParam(TypedDict, total=False):
    content: Required[str | Iterable[ChatCompletionContentPartTextParam]]
    role: Required[Literal["developer"]]
    name: str


class CustomChatCompletionMessageParam(TypedDict, total=False):
    role: Required[str]
    content: str | Iterable[Any] | None


_Message = ChatCompletionDeveloperMessageParam | CustomChatCompletionMessageParam
_Prompt = list[Annotated[int, Field(ge=0)]] | list[list[Annotated[int, Field(ge=0)]]] | str \
    | list[str] | None
_Seed = Annotated[int, Field(ge=-_INT64, le=_INT64 - 1)]


# The two requests share their sampling fields and their tail. pydantic orders a model's fields
# by its bases, the last first, then its own: _Chat reads _ChatHead's, _Sampling's, echo, then
# _Tail's, as vLLM does (tests/test_params.py pins both orders).
class _ChatHead(BaseModel):
    """vLLM's ChatCompletionRequest, the fields the proxy reads, in vLLM's order (its first
    error names the `param`): those before the sampling fields."""
    model_config = ConfigDict(extra="ignore")
    messages: list[_Message]
    model: str | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = None


class _CompletionsHead(BaseModel):
    """vLLM's CompletionRequest, the fields the proxy reads, in vLLM's order: those before the
    sampling fields."""
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    prompt: _Prompt = None
    echo: bool | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    max_tokens: int | None = None
    n: int = 1  # chat's may be null, completions' not


class _Sampling(BaseModel):
    """The fields both requests declare alike, in the same order, after their heads."""
    model_config = ConfigDict(extra="ignore")
    presence_penalty: float | None = None
    seed: _Seed | None = None
    stop: str | list[str] | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    ignore_eos: bool | None = None
    min_tokens: int | None = None


class _Tail(BaseModel):
    """The fields both requests end with, outside the cache key (effective.NEUTRAL): a hit must
    refuse what vLLM refuses (a review). `structured_outputs` (keyed) heads them, as in vLLM.

    Two bounds vLLM lacks, where it answers 500 (found by a probe): `structured_outputs` that
    is not an object (its before-validator calls `.get` on it: "'int' object has no attribute
    'get'"), and a `stream_interval` past 64 bits (the engine's message cannot carry it; 2**64
    - 1 still can, vLLM's 200). Each is a 400 naming the field here."""
    model_config = ConfigDict(extra="ignore")
    structured_outputs: dict[str, Any] | None = None
    priority: _Seed = 0
    request_id: str = ""
    session_id: str | None = None
    stream_interval: Annotated[int, Field(ge=1, lt=_UINT64)] | None = None


class _ChatSampling(_Sampling, _ChatHead):
    echo: bool | None = None  # chat's comes after the sampling fields


class _Chat(_Tail, _ChatSampling):
    pass


class _Completions(_Tail, _Sampling, _CompletionsHead):
    pass


_MODELS: dict[Kind, type[BaseModel]] = {"chat": _Chat, "completions": _Completions}


def check(kind: Kind, body: dict[str, Any], greedy: bool) -> None:
    """Raise what vLLM would answer for this body; else coerce its parameters in place."""
    messages = body.get("messages", [])  # vLLM's before-validator iterates them
    if kind == "chat" and (messages is None or isinstance(messages, int | float)):
        raise VllmValueError(f"'{type(messages).__name__}' object is not iterable")
    # vLLM's first check, on the raw body (a cache hit must refuse it too: found by a review,
    # such a request was a 200 HIT where vLLM answers 400)
    if body.get("stream_options") and not body.get("stream"):
        raise VllmValueError("Stream options can only be defined when `stream=True`. "
                             "(parameter=stream_options)", param="stream_options")
    _cache_salt(body.get("cache_salt"))
    # vLLM's own check before its typing: a number (true is 1), else this error
    if kind == "completions" and body.get("logprobs") is not None \
            and not isinstance(body["logprobs"], int | float):
        raise VllmValueError(f"`logprobs` must be an integer. (parameter=logprobs, "
                             f"value={body['logprobs']})", param="logprobs")
    model = _MODELS[kind]
    try:
        # as FastAPI validates it: a nested object that is not one is `model_attributes_type`
        parsed = model.model_validate(body, from_attributes=True)
    except ValidationError as exc:
        raise _type_error(exc) from None
    coerced = parsed.model_dump(exclude_unset=True, exclude={"messages"})
    for name, value in coerced.items():  # NaN stays NaN for vLLM, not null (logit_bias)
        if isinstance(value, float | dict):
            coerced[name] = openai.keep_nonfinite(value)
    body.update(coerced)  # a prompt [true] is [1], as vLLM reads it
    openai.validate(kind, body)
    _ranges(coerced, echo_only=effective.echo_only(kind, coerced))
    if kind == "completions":
        openai.check_prompts_not_empty(body["prompt"])
    n = coerced.get("n")
    if greedy and n is not None and n > 1:
        raise VllmValueError(f"n={n} asks for {n} choices, but this proxy forces greedy "
                             f"decoding, which gives exactly one: send n=1 or leave n out",
                             param="n")


def _cache_salt(salt: Any) -> None:
    """vLLM's validate_cache_salt (before its typing)."""
    if salt is None:
        return
    if not isinstance(salt, str) or not salt:
        raise VllmValueError("Parameter 'cache_salt' must be a non-empty string if provided. "
                             "(parameter=cache_salt)", param="cache_salt")
    if len(salt) > 128 or any(c in "@/\\\x00" for c in salt):
        raise VllmValueError("Parameter 'cache_salt' must be at most 128 characters and must "
                             "not contain '@', '/', '\\\\', or NUL. (parameter=cache_salt)",
                             param="cache_salt")


def _type_error(exc: ValidationError) -> VllmTypeError:
    errors = exc.errors(include_url=False)
    return validation_error([{**e, "loc": ("body", *e["loc"])} for e in errors])


def check_ranges(v: dict[str, Any]) -> None:
    """SamplingParams' range checks on coerced fields (proxy/responses.py: /v1/responses)."""
    _ranges(v)


def _ranges(v: dict[str, Any], echo_only: bool = False) -> None:
    """SamplingParams._verify_args, for the fields a client sets."""
    def bad(message: str, param: str | None = None) -> VllmValueError:
        return VllmValueError(message, param=param)

    for name in ("presence_penalty", "frequency_penalty"):
        if v.get(name) is not None and not -2.0 <= v[name] <= 2.0:
            raise bad(f"{name} must be in [-2, 2], got {v[name]}.")
    rep = v.get("repetition_penalty")
    if rep is not None and not math.isfinite(rep):
        raise bad(f"repetition_penalty must be a finite number, got {rep}.")
    if rep is not None and rep <= 0.0:
        raise bad(f"repetition_penalty must be greater than zero, got {rep}.")
    t = v.get("temperature")
    if t is not None:
        if not math.isfinite(t):
            raise bad(f"temperature must be a finite number, got {t}. (parameter=temperature, "
                      f"value={t})", "temperature")
        if t < 0.0:
            raise bad(f"temperature must be non-negative, got {t}. (parameter=temperature, "
                      f"value={t})", "temperature")
        if t > 2.0:
            raise bad(f"temperature must be in [0, 2], got {t}. (parameter=temperature, "
                      f"value={t})", "temperature")
    p = v.get("top_p")
    if p is not None and not 0.0 < p <= 1.0:
        raise bad(f"top_p must be in (0, 1], got {p}. (parameter=top_p, value={p})", "top_p")
    k = v.get("top_k")
    if k is not None and k < -1:
        raise bad(f"top_k must be 0 (disable), or at least 1, got {k}.")
    m = v.get("min_p")
    if m is not None and not 0.0 <= m <= 1.0:
        raise bad(f"min_p must be in [0, 1], got {m}.")
    if v.get("n") is not None and v["n"] < 1:
        raise bad(f"n must be at least 1, got {v['n']}.")
    mt = v.get("max_tokens")
    if v.get("max_completion_tokens") is not None:  # chat: the field vLLM reads first
        mt = v["max_completion_tokens"]
    if mt is not None and mt < 1 and not echo_only:
        raise bad(f"max_tokens must be at least 1, got {mt}. (parameter=max_tokens, "
                  f"value={mt})", "max_tokens")
    mn = v.get("min_tokens")
    if mn is not None and mn < 0:
        raise bad(f"min_tokens must be greater than or equal to 0, got {mn}.")
