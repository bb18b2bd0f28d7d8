"""OpenAI streaming shapes: fold a stream into one completion body, and replay a stored one."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from proxy.types import Chunks, Completion, Kind

DONE = b"data: [DONE]\n\n"


def event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


# vLLM 0.32's non-streaming bodies, field for field (nulls included), for answers folded from
# a stream; tests/test_replay_vllm.py diffs them against the real server.
_CHAT_MESSAGE_NULLS = ("refusal", "annotations", "audio", "function_call", "reasoning")
_TOP_NULLS: dict[Kind, tuple[str, ...]] = {
    "chat": ("service_tier", "system_fingerprint", "usage", "prompt_logprobs",
             "prompt_token_ids", "prompt_text", "kv_transfer_params", "ec_transfer_params",
             "metrics"),
    "completions": ("service_tier", "system_fingerprint", "usage", "kv_transfer_params",
                    "ec_transfer_params", "metrics"),
}


class Accumulator:
    """Folds parsed stream chunks into a non-streaming body shaped as vLLM's, and keeps the
    chunks themselves (without id/created) so a streamed replay is vLLM's own stream."""

    def __init__(self, kind: Kind, on_add: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self.on_add = on_add  # a streaming single flight's wake-up (cache/flight.py)
        self.head: dict[str, Any] = {}
        self.top: dict[str, Any] = {}  # system_fingerprint, prompt_token_ids, prompt_text
        self.texts: dict[int, list[str]] = {}
        self.finish: dict[int, Any] = {}
        self.stop_reason: dict[int, Any] = {}
        self.token_ids: dict[int, list[int] | None] = {}
        self.prompt_ids: dict[int, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.events: list[dict[str, Any]] = []
        self.failed = False  # an error event, or something we cannot replay (tool calls)
        self.raw: list[bytes] = []  # data payloads not parsed yet (see add_raw)

    def add_raw(self, payload: bytes) -> None:
        """One event's JSON, kept as it came: the relay passes chunks on without parsing them
        for the cache; completion() parses them all in one call at the end (the same total
        work, bench/relay_cost.py, but none of it between two chunks of a live stream)."""
        self.raw.append(payload)
        if self.on_add is not None:
            self.on_add()

    def _fold_raw(self) -> None:
        if not self.raw:
            return
        raw, self.raw = self.raw, []
        try:
            objs = orjson.loads(b"[" + b",".join(raw) + b"]")
        except orjson.JSONDecodeError:
            self.failed = True
            return
        for obj in objs:
            if isinstance(obj, dict):
                self.add(obj)

    def add(self, obj: dict[str, Any]) -> None:
        if "error" in obj:
            self.failed = True
            return
        if not self.head:
            self.head = {k: obj.get(k) for k in ("id", "created", "model")}
        self.events.append({k: v for k, v in obj.items() if k not in ("id", "created")})
        for key in ("system_fingerprint", "prompt_token_ids", "prompt_text"):
            if obj.get(key) is not None:
                self.top[key] = obj[key]
        if obj.get("usage"):
            self.usage = obj["usage"]
        for choice in obj.get("choices") or ():
            self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        i = choice.get("index", 0)
        if self.kind == "chat":
            delta = choice.get("delta") or {}
            if any(value for key, value in delta.items() if key not in ("role", "content")):
                self.failed = True  # tool calls, a reasoning parser's reasoning: not folded
            text = delta.get("content")
        else:
            text = choice.get("text")
            if choice.get("prompt_token_ids") is not None:
                self.prompt_ids[i] = choice["prompt_token_ids"]
        self.texts.setdefault(i, [])
        if text:
            self.texts[i].append(text)
        ids = choice.get("token_ids")
        if ids is not None:
            self.token_ids[i] = [*(self.token_ids.get(i) or []), *ids]
        if choice.get("finish_reason") is not None:
            self.finish[i] = choice["finish_reason"]
            self.stop_reason[i] = choice.get("stop_reason")

    def completion(self) -> Completion | None:
        """The folded answer, or None when it cannot be replayed. A chunk of a shape vLLM never
        sends (choices not a list of objects, a delta or usage that is not an object, text
        that is not a string) is such a case: its exception escaped to the stream's close
        before the cache's ticket was stored or abandoned, and the single flight stayed live
        for good, every identical stream following it forever (found by a review)."""
        try:
            return self._completion()
        except (AttributeError, TypeError, ValueError, KeyError):
            self.failed = True
            return None

    def _completion(self) -> Completion | None:
        self._fold_raw()
        if self.failed or not self.texts or len(self.finish) < len(self.texts):
            return None
        choices = [self._folded(i) for i in sorted(self.texts)]
        usage = None if self.usage is None else {
            **self.usage, "prompt_tokens_details": self.usage.get("prompt_tokens_details"),
            "completion_tokens_details": self.usage.get("completion_tokens_details")}
        body: dict[str, Any] = {
            **self.head, "object": "chat.completion" if self.kind == "chat"
            else "text_completion", "choices": choices,
            **{k: self.top.get(k) for k in _TOP_NULLS[self.kind]}, "usage": usage}
        pieces = tuple(self.texts[min(self.texts)])
        return Completion(body=body, pieces=pieces, events=orjson.dumps(self.events))

    def _folded(self, i: int) -> dict[str, Any]:
        text = "".join(self.texts[i])
        tail = {"logprobs": None, "finish_reason": self.finish[i],
                "stop_reason": self.stop_reason.get(i), "token_ids": self.token_ids.get(i)}
        if self.kind == "chat":
            message = {"role": "assistant", "content": text,
                       **dict.fromkeys(_CHAT_MESSAGE_NULLS)}
            return {"index": i, "message": message, **tail, "routed_experts": None}
        return {"index": i, "text": text, **tail, "prompt_logprobs": None,
                "prompt_token_ids": self.prompt_ids.get(i), "routed_experts": None}


def replay(kind: Kind, include_usage: bool, events: Chunks,
           rid: str | None = None) -> Iterator[bytes]:
    """A cached answer as a stream: vLLM's own chunks, stored from its stream (cut at a
    shorter limit by the lookup), with a new id and created; parsed and checked by the lookup
    (cache/serve.py's `answered`). A stream is never made from a JSON answer: it does not say
    where vLLM's tokens were, so its chunks would not be vLLM's (such a request is a miss)."""
    yield from _replayed(replay_head(kind, rid), events, include_usage)


def _replayed(head: dict[str, Any], events: list[dict[str, Any]],
              include_usage: bool) -> Iterator[bytes]:
    # The proxy always asks vLLM for the usage chunk. Without include_usage vLLM puts
    # system_fingerprint on the last content chunk instead: move it there when dropping usage.
    out: list[dict[str, Any]] = []
    for ev in events:
        if not ev.get("choices") and ev.get("usage") and not include_usage:
            if out and ev.get("system_fingerprint") is not None:
                out[-1]["system_fingerprint"] = ev["system_fingerprint"]
            continue
        out.append(reframe(head, ev))
    for ev in out:
        yield event(ev)
    yield DONE


def response_id(kind: Kind, rid: str | None = None) -> str:
    """The id vLLM gives the answer to a request the proxy sends with X-Request-ID `rid`
    (a miss's), so that a hit's is the same; a random one without."""
    return ("chatcmpl-" if kind == "chat" else "cmpl-") + (rid or uuid.uuid4().hex)


def replay_head(kind: Kind, rid: str | None = None) -> dict[str, Any]:
    """A replayed or followed stream's own id, object and created."""
    chat = kind == "chat"
    return {"id": response_id(kind, rid),
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time())}


def reframe(head: dict[str, Any], ev: dict[str, Any]) -> dict[str, Any]:
    """vLLM's chunk under the replay's own id and created (its other fields as they were)."""
    return {"id": head["id"], "object": ev.get("object", head["object"]),
            "created": head["created"],
            **{k: v for k, v in ev.items() if k not in ("object", "id", "created")}}
