"""Canonical request -> partition, exact key and the question text to embed.

The partition is a hard wall: two requests share cached answers only when everything that
could change vLLM's greedy output, other than the question text and the output length, is
equal: the request kind, the model, the tenant (unless the cache is shared), the embedder's
identity and every field proxy/effective.py lists as KEYED (system prompt, earlier turns,
tools, `response_format`, stop strings, penalties, seed ...). The output length is the one vLLM
will apply (proxy/effective.py: which of max_tokens / max_completion_tokens it reads) and is
kept on the entry. A field effective.py does not understand makes the request bypass the cache.

An object's key order is kept as sent wherever vLLM may see it (`_digest`): two tool or
response_format schemas that differ only in property order are two prompts or two grammars.

The semantic text is the *last user message* (chat) or the prompt string (completions); all
earlier turns are hashed into the partition, so a conversation is matched exactly up to its last
question and only that question is compared by meaning.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from proxy import effective, openai
from proxy.cache.config import REDIS_FORMAT
from proxy.types import Kind


@dataclass(frozen=True, slots=True)
class RequestKeys:
    namespace: str  # the model: what an operator flushes by
    partition: str  # hex digest of everything but the question and max_tokens
    exact: str  # hex digest of partition + the whole canonical question
    text: str | None  # the question to embed; None = exact tier only
    max_tokens: int | None
    # whether the answer's streamed pieces can be cut to a shorter max_tokens (serve.py): not
    # with stop strings (vLLM holds back text that may start one, so a piece lags its token)
    # nor with min_tokens (vLLM refuses a max_tokens below it)
    cuttable: bool = True


# Key order. A digest is of the JSON in the order given, not sorted: an object's key order can
# reach the model. A tool's `parameters` schema is rendered into the prompt by the template's
# `tojson` (transformers does not sort keys), a json schema in `response_format` or
# `structured_outputs` sets the order in which the grammar makes the model write the keys, and
# `chat_template_kwargs` and `documents` reach the template as sent. With every object sorted
# (format v2), two schemas differing only in property order shared one exact key, and the second
# was served the first's answer. Sorted, because vLLM never sees their order: the body's own
# fields (read by name into its request model), each message's own keys (vLLM reads role,
# content, tool_calls ... by name into a dict of its own for the template; their values stay as
# sent) and `logit_bias` (a bias added per token id), unless two of its keys are one token id
# ("1" and "01": vLLM keeps the later). Any other reordering, even one vLLM ignores (a tool's or
# a content part's own keys, the names in chat_template_kwargs), is a miss, never a wrong answer.
def _digest(value: Any) -> str:
    # exact for integers past 64 bits and NaN/Infinity as read (vLLM reads them so too)
    return hashlib.sha256(openai.dumps(value)).hexdigest()


def _sorted(value: dict[str, Any]) -> dict[str, Any]:
    """The object with its own keys sorted, its values as they are."""
    return {k: value[k] for k in sorted(value)}


def _message(message: Any) -> Any:
    return _sorted(message) if isinstance(message, dict) else message


def _keyed(kind: Kind, body: dict[str, Any]) -> dict[str, Any]:
    """effective.py's KEYED fields, by name, as the key holds them (see Key order above)."""
    rest = effective.keyed_fields(kind, body)
    bias = rest.get("logit_bias")
    if isinstance(bias, dict):
        try:
            distinct = len({int(token) for token in bias}) == len(bias)  # as vLLM reads them
        except (TypeError, ValueError):
            distinct = False  # vLLM's 400: keyed as sent
        if distinct:
            rest["logit_bias"] = _sorted(bias)
    return _sorted(rest)


def _text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    # a part whose text is not a string is vLLM's 400, not a question (found by a review: read
    # with str(), {"text": 5} asked "5" and hit the answer stored for "5")
    if isinstance(content, list) and all(
            isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
            for p in content):
        # as vLLM hands text parts to a string-content template: one per line (renderers/
        # chat_utils.py); "".join served "cat" + "dog" the answer to "catdog"
        return "\n".join(p["text"] for p in content)
    return None  # images, audio ...: exact tier only


def request_keys(kind: Kind, body: dict[str, Any], tenant: str, embedder_id: str) -> RequestKeys:
    model = str(body.get("model", ""))
    rest = _keyed(kind, body)
    text: str | None = None
    context: Any
    parts: int | None = None  # a question sent as N text parts: shares only with N parts
    if kind == "chat":
        messages = [_message(m) for m in body.get("messages") or []]
        last = messages[-1] if messages else None
        if isinstance(last, dict) and last.get("role") == "user" and set(last) <= {
                "role", "content"}:
            text = _text_of(last.get("content"))
            context = messages[:-1]
            if isinstance(last.get("content"), list):  # a template may render parts apart
                parts = len(last["content"])
        else:
            context = messages
        question: Any = messages
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        text = prompt if isinstance(prompt, str) else None
        context = None if text is not None else prompt
        question = prompt
    # the format too: a store without it in its keys (the embedded store's snapshot) then never
    # finds an entry keyed another way
    wall = {"format": REDIS_FORMAT, "kind": kind, "model": model, "tenant": tenant,
            "embedder": embedder_id, "rest": rest, "context": context}
    if parts is not None:
        wall["parts"] = parts
    partition = _digest(wall)
    exact = _digest({"partition": partition, "question": question})
    if text is not None and not text.strip():
        text = None
    return RequestKeys(namespace=model, partition=partition, exact=exact, text=text,
                       max_tokens=effective.output_tokens(kind, body),
                       cuttable=not body.get("stop") and not body.get("min_tokens"))
