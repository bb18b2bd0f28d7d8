"""OpenAI streaming shapes: fold a stream into one completion body, and unfold one back."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

import orjson

from proxy.types import Completion, Kind

DONE = b"data: [DONE]\n\n"
_PIECE = re.compile(r"\s*\S+\s*|\s+")


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class Accumulator:
    """Folds parsed stream chunks into a non-streaming body (content, finish_reason, usage)."""

    def __init__(self, kind: Kind) -> None:
        self.kind = kind
        self.head: dict[str, Any] = {}
        self.texts: dict[int, list[str]] = {}
        self.finish: dict[int, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.failed = False  # an error event, or something we cannot replay (tool calls)

    def add(self, obj: dict[str, Any]) -> None:
        if "error" in obj:
            self.failed = True
            return
        if not self.head:
            self.head = {k: obj.get(k) for k in ("id", "created", "model")}
        if obj.get("usage"):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or ():
            i = choice.get("index", 0)
            if self.kind == "chat":
                delta = choice.get("delta") or {}
                if delta.get("tool_calls") or delta.get("function_call"):
                    self.failed = True
                text = delta.get("content")
            else:
                text = choice.get("text")
            if text:
                self.texts.setdefault(i, []).append(text)
            else:
                self.texts.setdefault(i, [])
            if choice.get("finish_reason") is not None:
                self.finish[i] = choice["finish_reason"]

    def completion(self) -> Completion | None:
        if self.failed or not self.texts or len(self.finish) < len(self.texts):
            return None
        choices = []
        for i in sorted(self.texts):
            text = "".join(self.texts[i])
            if self.kind == "chat":
                choices.append({"index": i, "message": {"role": "assistant", "content": text},
                                "logprobs": None, "finish_reason": self.finish[i]})
            else:
                choices.append({"index": i, "text": text, "logprobs": None,
                                "finish_reason": self.finish[i]})
        body = {**self.head, "object": "chat.completion" if self.kind == "chat"
                else "text_completion", "choices": choices, "usage": self.usage}
        pieces = tuple(self.texts[min(self.texts)])
        return Completion(body=body, pieces=pieces)


def pieces_of(text: str) -> list[str]:
    return _PIECE.findall(text) or [text]


def replay(kind: Kind, answer: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    """A cached non-streaming answer as a valid stream: role, content pieces, finish, usage."""
    chat = kind == "chat"
    head = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": answer.get("model")}
    for choice in answer.get("choices") or ():
        i = choice.get("index", 0)
        if chat:
            yield event({**head, "choices": [{"index": i, "delta": {"role": "assistant",
                         "content": ""}, "logprobs": None, "finish_reason": None}]})
            text = (choice.get("message") or {}).get("content") or ""
        else:
            text = choice.get("text") or ""
        for piece in pieces_of(text) if text else ():
            part = {"content": piece} if chat else None
            yield event({**head, "choices": [
                {"index": i, "delta": part, "logprobs": None, "finish_reason": None} if chat
                else {"index": i, "text": piece, "logprobs": None, "finish_reason": None}]})
        last = {"index": i, "logprobs": None, "finish_reason": choice.get("finish_reason")}
        yield event({**head, "choices": [{**last, "delta": {}} if chat
                                         else {**last, "text": ""}]})
    if include_usage and answer.get("usage"):
        yield event({**head, "choices": [], "usage": answer["usage"]})
    yield DONE
