"""Whether (and how) a cached entry (entry.py) answers a request for `max_tokens`.

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
from typing import Any

from proxy.cache.entry import Entry, answer_text, chunks, cuttable
from proxy.types import Chunks, TextCounter


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
        else cut_chunks(entry.kind, stored, max_tokens, answer_text(answer))
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
    elif max_tokens is not None and 0 < max_tokens < used and cuttable(entry) \
            and entry.pieces is not None:
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
    answer["created"] = int(time.time())  # its id is the request's own (hit.py)
    return answer


def whole(entry: Entry, max_tokens: int | None) -> bool:
    """Whether a request with this `max_tokens` gets the entry's whole answer (not a cut):
    it stopped on its own within the limit, or was cut at exactly this limit."""
    reason, used = entry.finish_reason, entry.completion_tokens
    return used is not None and (
        (reason == "stop" and (max_tokens is None or max_tokens >= used))
        or (reason == "length" and max_tokens == entry.max_tokens))


def own_prompt(answer: dict[str, Any], events: Chunks | None, prompt_tokens: int
               ) -> tuple[dict[str, Any], Chunks | None]:
    """A semantic hit's answer and chunks with the usage of the request asked: its own prompt's
    tokens (as the proxy counted them to clip and charge it), the stored answer's completion
    tokens (a probe of session 23: the hit reported the stored question's prompt_tokens)."""
    def counted(usage: Any) -> Any:
        if not isinstance(usage, dict) or not isinstance(usage.get("prompt_tokens"), int):
            return usage
        done = usage.get("completion_tokens")
        total = prompt_tokens + done if isinstance(done, int) else usage.get("total_tokens")
        return {**usage, "prompt_tokens": prompt_tokens, "total_tokens": total}

    answer = {**answer, "usage": counted(answer["usage"])} if "usage" in answer else answer
    if events is not None:
        events = [{**c, "usage": counted(c["usage"])} if c.get("usage") else c for c in events]
    return answer, events
