"""Input clipping: count with the model's tokenizer; reject, or keep the system prompt and the
newest turns (dropping the oldest, trimming the one left if it must)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest, InputTooLong
from proxy.tokens import Messages, TokenCounter

SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class Clipped:
    body: dict[str, Any]
    input_tokens: int  # after clipping (the largest prompt, for a batch of prompts)
    original_tokens: int
    dropped: int = 0  # messages dropped
    trimmed: bool = False  # a message or prompt was cut

    @property
    def truncated(self) -> bool:
        return self.dropped > 0 or self.trimmed

    def header(self) -> str:
        return (f"tokens={self.original_tokens}->{self.input_tokens}; "
                f"dropped_messages={self.dropped}; trimmed={'yes' if self.trimmed else 'no'}")


def _too_long(sent: int, limit: int) -> InputTooLong:
    return InputTooLong(f"This request has {sent} input tokens, but at most {limit} input "
                        f"tokens are allowed. Shorten the input.", param="messages")


async def clip_chat(body: dict[str, Any], counter: TokenCounter, model: str, limit: int,
                    truncate: bool) -> Clipped:
    messages: Messages = body["messages"]
    tools = body.get("tools") if isinstance(body.get("tools"), list) else None

    async def count(msgs: Messages) -> int:
        return await counter.count_chat(model, msgs, tools)

    total = await count(messages)
    if total <= limit:
        return Clipped(body, total, total)
    if not truncate:
        raise _too_long(total, limit)
    system = [i for i, m in enumerate(messages) if m.get("role") in SYSTEM_ROLES]
    turns = [i for i, m in enumerate(messages) if m.get("role") not in SYSTEM_ROLES]
    if not turns:
        raise _too_long(total, limit)

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
        return Clipped({**body, "messages": kept}, tokens, total, dropped=best)
    # Even the newest turn alone is too long: keep the end of its text.
    last = kept[-1]
    content = last.get("content")
    if not isinstance(content, str):
        raise _too_long(tokens, limit)
    for _ in range(4):
        size = await counter.count_text(model, content)
        keep = size - (tokens - limit) - 1
        if keep <= 0:
            raise _too_long(tokens, limit)
        content = await counter.tail(model, content, keep)
        kept = [*kept[:-1], {**last, "content": content}]
        tokens = await count(kept)
        if tokens <= limit:
            return Clipped({**body, "messages": kept}, tokens, total, dropped=best,
                           trimmed=True)
    raise _too_long(tokens, limit)


async def _clip_one(prompt: str | list[int], counter: TokenCounter, model: str, limit: int,
                    truncate: bool) -> tuple[str | list[int], int, int]:
    size = len(prompt) if isinstance(prompt, list) else await counter.count_text(model, prompt)
    if size <= limit:
        return prompt, size, size
    if not truncate:
        raise _too_long(size, limit)
    if isinstance(prompt, list):
        return prompt[-limit:], limit, size
    keep = limit
    for _ in range(4):
        cut = await counter.tail(model, prompt, keep)
        now = await counter.count_text(model, cut)
        if now <= limit:
            return cut, now, size
        keep -= now - limit
    raise _too_long(size, limit)


async def clip_prompt(body: dict[str, Any], counter: TokenCounter, model: str, limit: int,
                      truncate: bool) -> Clipped:
    prompt = body["prompt"]
    single = isinstance(prompt, str) or (bool(prompt) and isinstance(prompt[0], int))
    prompts: list[Any] = [prompt] if single else list(prompt)
    out: list[Any] = []
    largest = original = 0
    for p in prompts:
        try:
            cut, tokens, size = await _clip_one(p, counter, model, limit, truncate)
        except InputTooLong as exc:
            exc.param = "prompt"
            raise
        out.append(cut)
        largest, original = max(largest, tokens), max(original, size)
    if largest == original and out == prompts:
        return Clipped(body, largest, original)
    if not out:
        raise BadRequest("'prompt' is empty", param="prompt")
    return Clipped({**body, "prompt": out[0] if single else out}, largest, original,
                   trimmed=True)
