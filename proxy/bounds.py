"""Bounds on the work one request can cause before it is understood: JSON nesting depth,
messages in a chat, prompts in a batch. Each breach is a 400/413 that names its limit and
setting. Large bodies are parsed and walked in a worker thread, never on the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy import openai
from proxy.errors import BadRequest, PayloadTooLarge
from proxy.types import Kind

INLINE_BYTES = 64 * 1024  # bodies larger than this are parsed off the event loop


class TooDeep(BadRequest):
    code = "json_too_deep"


class TooManyItems(PayloadTooLarge):
    code = "too_many_items"


@dataclass(frozen=True, slots=True)
class Bounds:
    max_depth: int = 64  # PROXY_MAX_JSON_DEPTH
    max_messages: int = 2048  # PROXY_MAX_MESSAGES
    max_prompts: int = 64  # PROXY_MAX_PROMPTS

    async def parse(self, raw: bytes, kind: Kind,
                    then: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """The body as a JSON object no deeper than max_depth, with no more messages or
        prompts than allowed (counted before any per-item work); `then` (the field checks:
        pydantic over every message or token id, ~100 ms at 4 MB) runs where the parse did."""
        if len(raw) <= INLINE_BYTES:
            return self._parse(raw, kind, then)
        return await asyncio.to_thread(self._parse, raw, kind, then)

    def _parse(self, raw: bytes, kind: Kind,
               then: Callable[[dict[str, Any]], None] | None) -> dict[str, Any]:
        body = openai.parse_json(raw)
        self.check_counts(kind, body)
        if depth_exceeds(body, self.max_depth):
            raise TooDeep(f"the request JSON is nested more than {self.max_depth} levels deep "
                          f"(the limit, PROXY_MAX_JSON_DEPTH)")
        if then is not None:
            then(body)
        return body

    def check_counts(self, kind: Kind, body: dict[str, Any]) -> None:
        """The number of messages, or of prompts in a batch (other shapes: validation's)."""
        if kind == "chat":
            messages = body.get("messages")
            n = len(messages) if isinstance(messages, list) else 0
            if n > self.max_messages:
                raise TooManyItems(f"the request has {n} messages; the limit is "
                                   f"{self.max_messages} (PROXY_MAX_MESSAGES)", param="messages")
            return
        n = prompt_count(body.get("prompt"))
        if n > self.max_prompts:
            raise TooManyItems(f"the request has a batch of {n} prompts; the limit is "
                               f"{self.max_prompts} (PROXY_MAX_PROMPTS)", param="prompt")


def prompt_count(prompt: Any) -> int:
    """1 for a string or one list of token ids; else the number of prompts in the batch."""
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        return len(prompt)
    return 1


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when containers nest deeper than limit (a scalar is depth 0, [] is depth 1)."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1)
                     for child in (node.values() if isinstance(node, dict) else node)
                     if isinstance(child, dict | list))
    return False
