"""Token counting with the served model's own tokenizer: local (transformers) or vLLM's /tokenize.

A local fast tokenizer beats a round trip; big inputs are counted in a worker thread so the
event loop stays free.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import orjson

from proxy import openai
from proxy.errors import BadRequest, ProxyError, UpstreamHTTPError
from proxy.types import TextCounter

log = logging.getLogger("proxy.tokens")
T = TypeVar("T")
INLINE_CHARS = 4096  # inputs larger than this are tokenized off the event loop
MESSAGE_CHARS = 32  # what one message weighs in that guess beyond its text (role, template)

Messages = list[dict[str, Any]]
# held around each call to vLLM's /tokenize or /detokenize (admission.CountGate.hold, a turn of
# the request's key: admission.request_key): it may refuse the call (429), as admission refuses
# a request it has no room for
Gate = Callable[[], AbstractAsyncContextManager[None]]


class Fetch(Protocol):
    """Upstream.fetch's shape: a whole answer from the upstream (the counter knows no client)."""

    async def __call__(self, method: str, path: str, content: bytes | None = None,
                       headers: Mapping[str, str] | None = None) -> bytes: ...


class TokenCounter(Protocol):
    async def count_chat(self, model: str, messages: Messages,
                         tools: list[Any] | None = None) -> int: ...

    async def count_text(self, model: str, text: str) -> int: ...

    async def tail(self, model: str, text: str, n_tokens: int) -> str:
        """The last n_tokens tokens of text, as text."""
        ...


@runtime_checkable
class TokenEncoder(Protocol):
    """A counter that can also hand out the token ids it counted (prefix routing hashes them)."""

    async def encode_chat(self, model: str, messages: Messages,
                          tools: list[Any] | None = None) -> list[int]: ...

    async def encode_text(self, model: str, text: str) -> list[int]: ...


def _ids(encoded: Any) -> list[int]:
    if isinstance(encoded, dict) or hasattr(encoded, "keys"):
        encoded = encoded["input_ids"]
    return list(encoded)


def _arguments(value: Any) -> Any:
    if isinstance(value, dict) or not value:
        return value or {}
    if not isinstance(value, str):
        return value
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return {}  # vLLM coerces malformed history to an empty object and goes on
    return parsed if isinstance(parsed, dict) else {}


def conversation(messages: Messages) -> Messages:
    """The messages as vLLM hands them to the chat template (renderers/chat_utils.py): null
    content is empty (an assistant turn of tool calls only), tool-call arguments are objects
    (JSON strings parsed; invalid or empty ones {}), an empty tool_calls list is dropped."""
    out = []
    for msg in messages:
        if not isinstance(msg, dict):
            out.append(msg)
            continue
        m = dict(msg)
        if m.get("content") is None:
            m["content"] = ""
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and isinstance(calls, list):
            if not calls:
                m.pop("tool_calls")
            else:
                m["tool_calls"] = [
                    {**c, "function": {**c["function"],
                                       "arguments": _arguments(c["function"].get("arguments"))}}
                    if isinstance(c, dict) and isinstance(c.get("function"), dict) else c
                    for c in calls]
        out.append(m)
    return out


class LocalCounter:
    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        # The Rust tokenizer straight, without transformers' per-call wrapping (offsets,
        # BatchEncoding): 145 -> 75 us for a 200-token chat (bench/profile.py found it).
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._fast = backend if hasattr(backend, "encode_batch_fast") else None

    async def _run(self, size: int, fn: Callable[[], T]) -> T:
        return fn() if size <= INLINE_CHARS else await asyncio.to_thread(fn)

    def _count(self, text: str, special: bool) -> int:
        if self._fast is not None:
            return len(self._fast.encode_batch_fast([text], add_special_tokens=special)[0])
        return len(self.tok.encode(text, add_special_tokens=special))

    def _encode(self, text: str, special: bool) -> list[int]:
        if self._fast is not None:
            return list(self._fast.encode_batch_fast([text], add_special_tokens=special)[0].ids)
        return _ids(self.tok.encode(text, add_special_tokens=special))

    def _template(self, messages: Messages, tools: list[Any] | None) -> str:
        try:
            return str(self.tok.apply_chat_template(
                conversation(messages), tools=tools, add_generation_prompt=True,
                tokenize=False))
        except Exception as exc:  # a template that refuses these messages
            raise BadRequest(f"the chat template rejected the messages: {exc}",
                             param="messages") from None

    async def count_chat(self, model: str, messages: Messages,
                         tools: list[Any] | None = None) -> int:
        # what tokenize=True does: the template writes the special tokens itself
        return await self._run(_size(messages, tools),
                               lambda: self._count(self._template(messages, tools), False))

    async def encode_chat(self, model: str, messages: Messages,
                          tools: list[Any] | None = None) -> list[int]:
        return await self._run(_size(messages, tools),
                               lambda: self._encode(self._template(messages, tools), False))

    async def count_text(self, model: str, text: str) -> int:
        return await self._run(len(text), lambda: self._count(text, True))

    async def encode_text(self, model: str, text: str) -> list[int]:
        return await self._run(len(text), lambda: self._encode(text, True))

    async def tail(self, model: str, text: str, n_tokens: int) -> str:
        def work() -> str:
            ids = self.tok.encode(text, add_special_tokens=False)
            return str(self.tok.decode(ids[-n_tokens:] if n_tokens > 0 else []))
        return await self._run(len(text), work)


class RemoteCounter:
    """vLLM's POST /tokenize and /detokenize, when no tokenizer is available here; each call
    within `gate` (a request counted here has no admission slot yet)."""

    def __init__(self, fetch: Fetch, gate: Gate = nullcontext) -> None:
        self.fetch = fetch
        self.gate = gate

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            async with self.gate():
                content = await self.fetch("POST", path, openai.dumps(body),
                                           {"content-type": "application/json"})
        except UpstreamHTTPError as exc:
            raise BadRequest(f"vLLM could not tokenize the input: "
                             f"{exc.content.decode('utf-8', 'replace')[:500]}") from None
        data: dict[str, Any] = orjson.loads(content)
        return data

    async def _chat(self, model: str, messages: Messages,
                    tools: list[Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": messages,
                                "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        return await self._post("/tokenize", body)

    async def count_chat(self, model: str, messages: Messages,
                         tools: list[Any] | None = None) -> int:
        return int((await self._chat(model, messages, tools))["count"])

    async def encode_chat(self, model: str, messages: Messages,
                          tools: list[Any] | None = None) -> list[int]:
        return list((await self._chat(model, messages, tools))["tokens"])

    async def count_text(self, model: str, text: str) -> int:
        return int((await self._post("/tokenize", {"model": model, "prompt": text}))["count"])

    async def encode_text(self, model: str, text: str) -> list[int]:
        return list((await self._post("/tokenize", {"model": model, "prompt": text}))["tokens"])

    async def tail(self, model: str, text: str, n_tokens: int) -> str:
        ids = (await self._post("/tokenize", {"model": model, "prompt": text,
                                              "add_special_tokens": False}))["tokens"]
        kept = ids[-n_tokens:] if n_tokens > 0 else []
        return str((await self._post("/detokenize", {"model": model, "tokens": kept}))["prompt"])


def _size(messages: Messages, tools: list[Any] | None = None) -> int:
    """A guess at the work of templating and tokenizing: text, plus each message's own cost
    (100k empty messages are seconds of template work), plus the tools' JSON."""
    total = MESSAGE_CHARS * len(messages)
    if tools:
        total += len(openai.dumps(tools))  # may hold an integer past 64 bits
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(str(p.get("text", ""))) for p in content if isinstance(p, dict))
    return total


def load_local(name_or_path: str) -> LocalCounter:
    from transformers import AutoTokenizer  # slow import: only when a tokenizer is wanted

    return LocalCounter(AutoTokenizer.from_pretrained(name_or_path))


def _load_if_present(path: str) -> LocalCounter | None:
    return load_local(path) if Path(path).exists() else None


class AutoCounter:
    """PROXY_TOKENIZER if set (it must load); else the model path vLLM reports, if it exists
    here (tried once, when first known); else vLLM's /tokenize (within `gate`)."""

    def __init__(self, fetch: Fetch, configured: str | None, gate: Gate = nullcontext) -> None:
        self.remote = RemoteCounter(fetch, gate)
        self.local: LocalCounter | None = None
        self.configured = configured
        self.tried: set[str] = set()

    @property
    def source(self) -> str:
        return "local" if self.local is not None else "remote"

    async def start(self) -> None:
        if self.configured:
            try:
                self.local = await asyncio.to_thread(load_local, self.configured)
            except Exception as exc:
                raise ProxyError(f"PROXY_TOKENIZER={self.configured!r} could not be loaded: "
                                 f"{exc}") from None

    async def discover(self, root: str | None) -> None:
        if self.local is not None or self.configured or not root or root in self.tried:
            return
        self.tried.add(root)
        try:
            self.local = await asyncio.to_thread(_load_if_present, root)
        except Exception as exc:
            log.warning("tokenizer at %s did not load (%s); using vLLM /tokenize", root, exc)

    async def on_models(self, models: dict[str, Any]) -> None:
        for info in models.values():
            await self.discover(getattr(info, "root", None))
            return

    def count_sync(self) -> TextCounter | None:
        """Plain text -> tokens (no special tokens), when a local tokenizer is loaded."""
        if self.local is None:
            return None
        tok = self.local.tok
        return lambda text: len(tok.encode(text, add_special_tokens=False))

    def _pick(self) -> LocalCounter | RemoteCounter:
        return self.local if self.local is not None else self.remote

    async def count_chat(self, model: str, messages: Messages,
                         tools: list[Any] | None = None) -> int:
        return await self._pick().count_chat(model, messages, tools)

    async def count_text(self, model: str, text: str) -> int:
        return await self._pick().count_text(model, text)

    async def encode_chat(self, model: str, messages: Messages,
                          tools: list[Any] | None = None) -> list[int]:
        return await self._pick().encode_chat(model, messages, tools)

    async def encode_text(self, model: str, text: str) -> list[int]:
        return await self._pick().encode_text(model, text)

    async def tail(self, model: str, text: str, n_tokens: int) -> str:
        return await self._pick().tail(model, text, n_tokens)
