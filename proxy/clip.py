"""Input clipping: count with the model's tokenizer; reject, or keep the system prompt and the
newest turns (dropping the oldest, trimming the one left if it must)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy import effective
from proxy.errors import BadRequest, InputTooLong, context_exceeded
from proxy.tokens import Messages, TokenCounter, TokenEncoder
from proxy.types import Kind

SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Clipped:
    body: dict[str, Any]
    input_tokens: int  # after clipping (the largest prompt, for a batch of prompts)
    original_tokens: int
    dropped: int = 0  # messages dropped
    trimmed: bool = False  # a message or prompt was cut
    token_ids: list[int] | None = None  # the (first) prompt's ids, when asked for (routing)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0 or self.trimmed

    def header(self) -> str:
        return (f"tokens={self.original_tokens}->{self.input_tokens}; "
                f"dropped_messages={self.dropped}; trimmed={'yes' if self.trimmed else 'no'}")


def kept_by_vllm(kind: Kind, body: dict[str, Any], max_model_len: int | None) -> int | None:
    """The prompt tokens vLLM keeps when the request asks it to truncate the prompt
    (`truncate_prompt_tokens`: that many; -1: the context, less the one token it holds back
    for output when the request names an output length: completions always do, 16 by default;
    a chat with none keeps the whole context, which then leaves no room: vLLM's 400); None when
    it does not (or the value is one vLLM refuses: it answers that)."""
    n = body.get("truncate_prompt_tokens")
    if isinstance(n, bool) or not isinstance(n, int):
        return None
    if n == -1:
        if max_model_len is None:
            return None
        return max_model_len - 1 if effective.output_tokens(kind, body) else max_model_len
    return n if n >= 1 else None


def _too_long(sent: int, limit: int, context: int | None, original: int,
              ids: bool = False) -> BadRequest:
    """The proxy's refusal of a prompt past its own limit (PROXY_MAX_INPUT_TOKENS); when the
    model's context is the limit (`context`), vLLM's own refusal of the prompt as it was sent
    (`original` tokens; `ids`: a list of token ids), as a client without the proxy would get."""
    if context is not None:
        return context_exceeded(original, context, ids)
    return InputTooLong(f"This request has {sent} input tokens, but at most {limit} input "
                        f"tokens are allowed. Shorten the input.", param="messages")


async def clip_chat(body: dict[str, Any], counter: TokenCounter, model: str, limit: int,
                    truncate: bool, ids: bool = False, context: int | None = None) -> Clipped:
    """ids: also return the prompt's token ids (one tokenization, when the counter can);
    context: the model's, when it is what sets the limit (a refusal is then vLLM's)."""
    messages: Messages = body["messages"]
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None
    encoder = counter if ids and isinstance(counter, TokenEncoder) else None

    async def count(msgs: Messages) -> int:
        return await counter.count_chat(model, msgs, tools)

    async def encode(msgs: Messages) -> list[int] | None:
        return None if encoder is None else await encoder.encode_chat(model, msgs, tools)

    first = await encode(messages)
    total = len(first) if first is not None else await count(messages)
    if total <= limit:
        return Clipped(body, total, total, token_ids=first)

    def too_long(sent: int) -> BadRequest:
        return _too_long(sent, limit, context, total)

    if not truncate:
        raise too_long(total)
    system = [i for i, m in enumerate(messages) if m.get("role") in SYSTEM_ROLES]
    turns = [i for i, m in enumerate(messages) if m.get("role") not in SYSTEM_ROLES]
    if not turns:
        raise too_long(total)

    def keep_from(k: int) -> Messages:
        kept = set(system) | set(turns[k:])
        return [m for i, m in enumerate(messages) if i in kept]

    # Binary search the fewest oldest turns to drop (keeping at least the newest one).
    lo, hi = 1, len(turns) - 1
    best = len(turns) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if await count(keep_from(mid)) <= limit:
            best, hi = mid, mid - 1
        else:
            lo = mid + 1
    # Start the kept conversation at a user turn when one is left to start at.
    while best < len(turns) - 1 and messages[turns[best]].get("role") != "user":
        best += 1
    kept = keep_from(best)
    tokens = await count(kept)
    if tokens <= limit:
        return Clipped({**body, "messages": kept}, tokens, total, dropped=best,
                       token_ids=await encode(kept))
    # Even the newest turn alone is too long: keep the end of its text.
    last = kept[-1]
    content = last.get("content")
    if not isinstance(content, str):
        raise too_long(tokens)
    for _ in range(4):
        size = await counter.count_text(model, content)
        keep = size - (tokens - limit) - 1
        if keep <= 0:
            raise too_long(tokens)
        content = await counter.tail(model, content, keep)
        kept = [*kept[:-1], {**last, "content": content}]
        tokens = await count(kept)
        if tokens <= limit:
            return Clipped({**body, "messages": kept}, tokens, total, dropped=best,
                           trimmed=True, token_ids=await encode(kept))
    raise too_long(tokens)


async def _prompt_ids(prompt: str | list[int], counter: TokenCounter, model: str,
                      ids: bool) -> list[int] | None:
    if isinstance(prompt, list):
        return prompt
    if ids and isinstance(counter, TokenEncoder):
        return await counter.encode_text(model, prompt)
    return None


async def _clip_one(prompt: str | list[int], counter: TokenCounter, model: str, limit: int,
                    truncate: bool, ids: bool, context: int | None
                    ) -> tuple[str | list[int], int, int, list[int] | None]:
    encoded = await _prompt_ids(prompt, counter, model, ids)
    if encoded is not None:
        size = len(encoded)
    else:
        assert isinstance(prompt, str)  # a list of ids is its own encoding
        size = await counter.count_text(model, prompt)
    if size <= limit:
        return prompt, size, size, encoded
    if not truncate:
        raise _too_long(size, limit, context, size, isinstance(prompt, list))
    if isinstance(prompt, list):
        return prompt[-limit:], limit, size, prompt[-limit:]
    keep = limit
    for _ in range(4):
        cut = await counter.tail(model, prompt, keep)
        now = await counter.count_text(model, cut)
        if now <= limit:
            return cut, now, size, await _prompt_ids(cut, counter, model, ids)
        keep -= now - limit
    raise _too_long(size, limit, context, size)


async def clip_prompt(body: dict[str, Any], counter: TokenCounter, model: str, limit: int,
                      truncate: bool, ids: bool = False, context: int | None = None) -> Clipped:
    """ids: also return the first prompt's token ids, for routing; context: as clip_chat's.
    The prompts of a batch are counted in order, and the first one too long is refused, as
    vLLM's renderer does."""
    prompt = body["prompt"]
    single = isinstance(prompt, str) or (bool(prompt) and isinstance(prompt[0], int))
    prompts: list[Any] = [prompt] if single else list(prompt)
    out: list[Any] = []
    largest = original = 0
    first: list[int] | None = None
    for i, p in enumerate(prompts):
        try:
            cut, tokens, size, encoded = await _clip_one(p, counter, model, limit, truncate,
                                                         ids and i == 0, context)
        except InputTooLong as exc:
            exc.param = "prompt"
            raise
        out.append(cut)
        first = encoded if i == 0 else first
        largest, original = max(largest, tokens), max(original, size)
    if largest == original and out == prompts:
        return Clipped(body, largest, original, token_ids=first)
    if not out:
        raise BadRequest("'prompt' is empty", param="prompt")
    return Clipped({**body, "prompt": out[0] if single else out}, largest, original,
                   trimmed=True, token_ids=first)
