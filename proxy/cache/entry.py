"""One cached answer as it is stored (Entry: its JSON, and the Redis record that keeps its
stream's chunks apart), which answers are worth storing (`storable`), whether its stored
chunks can be replayed (`chunks`), and which of two entries under one exact key to keep
(`better`). Whether and how an entry answers a request: serve.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.types import Chunks, Events


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
    said = (finish, "".join(texts)) == (entry.finish_reason, answer_text(entry.answer))
    return parsed if said else None


def _first_choice(answer: dict[str, Any]) -> dict[str, Any] | None:
    """The answer's first choice; None for a shape vLLM never answers."""
    choices = answer.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return first if isinstance(first, dict) else None


def answer_text(answer: dict[str, Any]) -> Any:
    """The text of the answer's (first) choice; None for a shape vLLM never answers."""
    choice = _first_choice(answer)
    if choice is None:
        return None
    message = choice.get("message")
    return message.get("content") if isinstance(message, dict) else choice.get("text")


def better(new: Entry, old: Entry) -> bool:
    """Whether `new` should replace `old` under the same exact key: always when `old`'s stored
    stream cannot be replayed (`chunks`: its stop answer kept it in place for good); else the
    one that answers more requests: a stop answer over one cut by its limit, a higher limit
    over a lower one, and where both answer the same requests (both stopped, or both cut at
    one limit: the same greedy answer), the one with the stream's chunks over one without, as
    only it answers a stream (serve.py: `answered`; before, a stored JSON answer was kept
    over the streamed one, and every stream after it was a miss)."""
    if old.events is not None and chunks(old) is None:
        return True
    streamed = (new.events is not None, old.events is not None)
    if old.finish_reason == "stop":
        return new.finish_reason == "stop" and streamed == (True, False)
    if new.finish_reason == "stop":
        return True
    if new.max_tokens == old.max_tokens:
        return streamed != (False, True)
    if (new.max_tokens or 0) > (old.max_tokens or 0):
        return True
    # a lower limit: the older answer serves it only by a cut; one that cannot be cut (no
    # pieces: a JSON answer) answers its own limit alone, as the new one does, and was kept
    # for good: every shorter ask of its question a miss (found by a probe). The new one is
    # the limit asked now.
    return not cuttable(old)


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


def cuttable(entry: Entry) -> bool:
    """Whether a shorter `max_tokens` may be answered by cutting this entry (serve.py): its
    text kept one piece a token (a stream's, with no stop strings nor min_tokens) and nothing
    in its answer but the text."""
    used = entry.completion_tokens
    return used is not None and entry.pieces is not None and len(entry.pieces) == used \
        and text_only(entry.answer)

