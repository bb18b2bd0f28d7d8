"""Stored responses kept apart per API key. vLLM's Responses API (VLLM_ENABLE_RESPONSES_API_STORE
=1) keeps a response under its request's `request_id` (a body field the client may set; else
`resp_` and 16 hex digits) and serves it to whoever names that id: `GET /v1/responses/{id}`,
its cancel, `previous_response_id`; a POST with the same `request_id` replaces it. Any key could
read, cancel, chain onto or overwrite another's (found by a review).

Each key has its own ids: vLLM is given the client's id with the key's tag appended (`~` and
16 hex digits of an HMAC-SHA256 keyed by the API key), and the tag is taken out of whatever
vLLM answers (JSON, whole SSE events, error bodies), so the client sees its ids as vLLM alone
shows them. An id another key names is another id at vLLM: its 404 is an unknown id's, and no
choice of id reaches another key's (each one the proxy sends ends in the caller's own tag).
The tag is derived from the key, not from a secret made at start: every worker process
(PROXY_WORKERS), proxy replica and restart tags a key's ids alike. Without API keys the tag is
empty and ids pass as they are."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass
from typing import Any

_CONTEXT = b"vllm-smart-proxy response ids"


def tag(key: str) -> str:
    """A key's tag. Not its identity (which logs and metrics show): only with the key can one
    tell whose an id at vLLM is."""
    return hmac.new(key.encode(), _CONTEXT, hashlib.sha256).hexdigest()[:16]


def new_id() -> str:
    """An id as vLLM makes one (ResponsesRequest.request_id: `resp_` + random_uuid())."""
    return f"resp_{uuid.uuid4().int & ((1 << 64) - 1):016x}"


@dataclass(frozen=True, slots=True)
class ResponseIds:
    """One caller's ids: `suffix` is "~" and its key's tag ("" without API keys)."""

    suffix: str = ""

    def upstream(self, response_id: str) -> str:
        return response_id + self.suffix

    def ask(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body (responses.check()ed: its ids are strings) with the ids vLLM is to know:
        its `request_id` (the client's, else one made here as vLLM makes it) and its
        `previous_response_id`."""
        given = body.get("request_id")
        out = {**body, "request_id": self.upstream(given if isinstance(given, str) else new_id())}
        previous = body.get("previous_response_id")
        if isinstance(previous, str):
            out["previous_response_id"] = self.upstream(previous)
        return out

    def shown(self, content: bytes) -> bytes:
        """What vLLM answered, its ids as the client named them. The tag is hex after a `~`,
        which no JSON, SSE or repr escapes: it is found whatever quotes the id."""
        return content.replace(self.suffix.encode(), b"") if self.suffix else content


AS_IS = ResponseIds()  # no tag: a route with no response ids
