"""One cached answer, and whether (and how) it answers a request for `max_tokens`.

Greedy output for `max_tokens=m` is the first `m` tokens of the output for any larger limit.
So an entry that stopped naturally after `k` tokens answers every request with `m >= k`
(or no limit), and an entry cut by its limit `M` answers `m == M` as is and `m < M` only by
cutting exactly `m` tokens. A cut needs token-accurate pieces: the entry must have been
streamed with one delta per token (`len(pieces) == completion_tokens`) and, when the proxy
gave us a token counter, the cut text must count as exactly `m` tokens; the request had no stop
strings or min_tokens (cache/keys.py: `cuttable`; else the entry keeps no pieces). Otherwise:
a miss.
"""

from __future__ import annotations

import copy
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.types import Chunks, Events, TextCounter


@dataclass(slots=True)
class Entry:
    exact: str
    partition: str
    namespace: str
    kind: str
    text: str | None
    max_tokens: int | None
    answer: dict[str, Any]
    pieces: tuple[str, ...] | None = None
    vector: bytes | None = None  # float32, normalized; None = exact tier only
    events: Events | None = None  # vLLM's stream chunks, one JSON array (types.Events)
    created: float = field(default_factory=time.time)
    id: int = 0

    @property
    def finish_reason(self) -> str | None:
        first = _first_choice(self.answer)  # None in a record of another shape (redis_store)
        reason = first.get("finish_reason") if first is not None else None
        return str(reason) if reason is not None else None

    @property
    def completion_tokens(self) -> int | None:
        usage = self.answer.get("usage")  # an upstream's odd usage (5, "x") was a 500 at
        value = usage.get("completion_tokens") if isinstance(usage, dict) else None  # lookup
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def to_json(self, events: bool = True) -> bytes:
        return orjson.dumps({
            "exact": self.exact, "partition": self.partition, "namespace": self.namespace,
            "kind": self.kind, "text": self.text, "max_tokens": self.max_tokens,
            "answer": self.answer, "pieces": self.pieces, "created": self.created,
            "id": self.id, "vector": self.vector.hex() if self.vector else None,
            "events": None if self.events is None or not events
            else orjson.Fragment(self.events)})

    def to_record(self) -> bytes:
        """For Redis: the entry's JSON without its events, a newline, then the events as they
        are stored, so a read splits them off instead of parsing and re-writing the stream
        (orjson writes no raw newline, so the first one is the boundary)."""
        head = self.to_json(events=False)
        return head if self.events is None else head + b"\n" + self.events

    @staticmethod
    def from_record(raw: bytes) -> Entry:
        """to_record's bytes, or an entry written by to_json (its events inside)."""
        head, newline, events = raw.partition(b"\n")
        entry = Entry.from_json(head)
        if newline:
            entry.events = events
        return entry

    @staticmethod
    def from_json(raw: bytes | str) -> Entry:
        d = orjson.loads(raw)
        pieces = d.get("pieces")
        return Entry(exact=d["exact"], partition=d["partition"], namespace=d["namespace"],
                     kind=d["kind"], text=d.get("text"), max_tokens=d.get("max_tokens"),
                     answer=d["answer"], pieces=tuple(pieces) if pieces is not None else None,
                     vector=bytes.fromhex(d["vector"]) if d.get("vector") else None,
                     created=float(d.get("created", 0.0)), id=int(d.get("id", 0)),
                     events=orjson.dumps(d["events"]) if d.get("events") else None)


def storable(answer: dict[str, Any]) -> bool:
    """Only whole, plain answers: one choice, finish "stop"/"length", no error, no tool calls."""
    if answer.get("error") is not None:
        return False
    choices = answer.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    if choice.get("finish_reason") not in ("stop", "length") or choice.get("logprobs"):
        return False
    message = choice.get("message")
    if isinstance(message, dict):
        if message.get("tool_calls") or message.get("function_call"):
            return False
        return isinstance(message.get("content"), str)
    return isinstance(choice.get("text"), str)


_TEXT_ONLY = frozenset({"index", "message", "text", "finish_reason", "stop_reason"})


def text_only(answer: dict[str, Any]) -> bool:
    """Whether the answer is its text alone, as far as a cut can tell: a cut of it (serve)
    rewrites only the text, the finish and stop reasons and the usage; anything else with a
    value in its choice or message (a reasoning parser's `reasoning`, `return_token_ids`' ids)
    would be left uncut (found by a review: such hits kept a longer answer's token ids)."""
    choices = answer.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        return False
    choice = choices[0]
    if any(value for key, value in choice.items() if key not in _TEXT_ONLY):
        return False
    message = choice.get("message")
    return not isinstance(message, dict) or not any(
        value for key, value in message.items() if key not in ("role", "content"))


def answered(entry: Entry, max_tokens: int | None, streams: bool,
             count: TextCounter | None = None) -> tuple[dict[str, Any], Chunks | None] | None:
    """A hit's answer body for a request with this `max_tokens` and, for a stream, vLLM's
    chunks to replay: the stored ones for the whole answer, cut at the limit for a cut (JSON:
    None); None when the entry does not answer the request exactly. A stream is answered only
    from an answer stored with its chunks: one stored from a JSON answer is a stream's miss,
    and the streamed answer then replaces it (`better`). A stream made from the answer's text
    was re-chunked at word boundaries (' 1721 ', '1027 ' where vLLM streams ' 1721', ' 1027',
    one chunk a token, and empty chunks for incomplete UTF-8): not vLLM's stream (found by a
    review). Stored chunks that cannot be replayed (`chunks`) are a miss too."""
    answer = serve(entry, max_tokens, count)
    if answer is None or not streams:
        return None if answer is None else (answer, None)
    stored = chunks(entry) if entry.events is not None else None
    if stored is None:
        return None
    if whole(entry, max_tokens):
        return answer, stored
    # a cut: vLLM's own chunks, one a token, up to the limit (found by a review: the cut was
    # re-chunked at word boundaries, where vLLM's never split)
    cut = None if max_tokens is None \
        else cut_chunks(entry.kind, stored, max_tokens, _text(answer))
    return None if cut is None else (answer, cut)


def cut_chunks(kind: str, stored: Chunks, max_tokens: int, text: Any) -> Chunks | None:
    """The stored stream as vLLM streams the first `max_tokens` of it: the chunks before the
    content (chat's role chunk), the first `max_tokens` content chunks (`serve` cuts only an
    answer streamed one token a chunk), the last of them ending the answer as vLLM ends one at
    its limit (finish_reason "length", stop_reason null), then the usage chunk with the cut's
    counts. None when the chunks do not say the cut's `text` (the answer `serve` made)."""
    holder = "delta" if kind == "chat" else None
    field = "content" if kind == "chat" else "text"
    out: Chunks = []
    said: list[str] = []
    for chunk in stored:
        choices = chunk.get("choices") or []
        if not choices:
            usage = chunk.get("usage")
            if isinstance(usage, dict) and len(said) == max_tokens:
                counts = {**usage, "completion_tokens": max_tokens}
                if isinstance(usage.get("prompt_tokens"), int):
                    counts["total_tokens"] = usage["prompt_tokens"] + max_tokens
                out.append({**chunk, "usage": counts})
            continue
        if len(said) == max_tokens or len(choices) != 1:
            continue
        choice = choices[0]
        piece = (choice.get(holder) or {}) if holder else choice
        content = piece.get(field) if isinstance(piece, dict) else None
        if not content:  # the role chunk (content ""): before the first token
            if said:
                return None
            out.append(chunk)
            continue
        said.append(content)
        if len(said) < max_tokens:
            out.append(chunk)
            continue
        last: dict[str, Any] = {}
        for key, value in choice.items():
            if key != "stop_reason":
                last[key] = value
            if key == "finish_reason":
                last.update(finish_reason="length", stop_reason=None)
        last.setdefault("finish_reason", "length")
        last.setdefault("stop_reason", None)
        out.append({**chunk, "choices": [last]})
    return out if len(said) == max_tokens and "".join(said) == text else None


def chunks(entry: Entry) -> Chunks | None:
    """The entry's stored stream, parsed for a replay; None when this version cannot replay
    it: not a list of chunk objects with lists of choice objects, text that is not text, or
    chunks that do not say the answer's text and finish (a corrupted record, or another
    version's or program's under the Redis prefix). Such chunks were replayed unchecked: they
    failed mid-stream after the status line, or streamed another answer (found by a review).
    Checked where a replay parses them anyway, not on every read of the entry."""
    try:
        parsed = orjson.loads(entry.events) if entry.events is not None else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, list):
        return None
    chat = entry.kind == "chat"
    texts: list[str] = []
    finish: Any = None
    for chunk in parsed:
        choices = chunk.get("choices", []) if isinstance(chunk, dict) else None
        if not isinstance(choices, list):
            return None
        for choice in choices:
            holder = (choice.get("delta") or {}) if chat and isinstance(choice, dict) else choice
            if not isinstance(holder, dict):
                return None
            text = holder.get("content" if chat else "text")
            if text is not None and not isinstance(text, str):
                return None
            texts.append(text or "")
            finish = choice.get("finish_reason") or finish
    said = (finish, "".join(texts)) == (entry.finish_reason, _text(entry.answer))
    return parsed if said else None


def _first_choice(answer: dict[str, Any]) -> dict[str, Any] | None:
    """The answer's first choice; None for a shape vLLM never answers."""
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return first if isinstance(first, dict) else None


def _text(answer: dict[str, Any]) -> Any:
    """The text of the answer's (first) choice; None for a shape vLLM never answers."""
    choice = _first_choice(answer)
    if choice is None:
        return None
    message = choice.get("message")
    return message.get("content") if isinstance(message, dict) else choice.get("text")


def _set_text(answer: dict[str, Any], text: str) -> None:
    choice = answer["choices"][0]
    if isinstance(choice.get("message"), dict):
        choice["message"]["content"] = text
    else:
        choice["text"] = text


def serve(entry: Entry, max_tokens: int | None,
          count: TextCounter | None = None) -> dict[str, Any] | None:
    """The answer body for a request with this `max_tokens`, or None when not exactly right.
    (A whole answer may also be replayed from `entry.events`: see `answered`.)"""
    used = entry.completion_tokens
    if used is None:
        return None
    answer: dict[str, Any] | None = None
    if whole(entry, max_tokens):
        answer = copy.deepcopy(entry.answer)
    elif max_tokens is not None and 0 < max_tokens < used and entry.pieces is not None \
            and len(entry.pieces) == used and text_only(entry.answer):
        text = "".join(entry.pieces[:max_tokens])
        if count is not None and count(text) != max_tokens:
            return None
        answer = copy.deepcopy(entry.answer)
        _set_text(answer, text)
        answer["choices"][0]["finish_reason"] = "length"
        if "stop_reason" in answer["choices"][0]:
            answer["choices"][0]["stop_reason"] = None  # vLLM's for a length finish
        usage = answer.setdefault("usage", {})
        usage["completion_tokens"] = max_tokens
        if isinstance(usage.get("prompt_tokens"), int):
            usage["total_tokens"] = usage["prompt_tokens"] + max_tokens
    if answer is None:
        return None
    prefix = "chatcmpl" if entry.kind == "chat" else "cmpl"
    answer["id"] = f"{prefix}-cache-{uuid.uuid4().hex}"
    answer["created"] = int(time.time())
    return answer


def better(new: Entry, old: Entry) -> bool:
    """Whether `new` should replace `old` under the same exact key: always when `old`'s stored
    stream cannot be replayed (`chunks`: its stop answer kept it in place for good); else the
    one that answers more requests: a stop answer over one cut by its limit, a higher limit
    over a lower one, and where both answer the same requests (both stopped, or both cut at
    one limit: the same greedy answer), the one with the stream's chunks over one without, as
    only it answers a stream (`answered`: before, a stored JSON answer was kept over the
    streamed one, and every stream after it was a miss)."""
    if old.events is not None and chunks(old) is None:
        return True
    streamed = (new.events is not None, old.events is not None)
    if old.finish_reason == "stop":
        return new.finish_reason == "stop" and streamed == (True, False)
    if new.finish_reason == "stop":
        return True
    if new.max_tokens == old.max_tokens:
        return streamed != (False, True)
    return (new.max_tokens or 0) > (old.max_tokens or 0)


def whole(entry: Entry, max_tokens: int | None) -> bool:
    """Whether a request with this `max_tokens` gets the entry's whole answer (not a cut):
    it stopped on its own within the limit, or was cut at exactly this limit."""
    reason, used = entry.finish_reason, entry.completion_tokens
    return used is not None and (
        (reason == "stop" and (max_tokens is None or max_tokens >= used))
        or (reason == "length" and max_tokens == entry.max_tokens))
