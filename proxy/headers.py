"""The headers every route sends the same way: to vLLM (its request id) and to a client that
is streamed SSE (no caching, no proxy buffering)."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.openai import JSON
from proxy.sending import SSE


def upstream_headers(rid: str) -> dict[str, str]:
    """A JSON request to vLLM, carrying the client's request id."""
    return {"content-type": JSON, "x-request-id": rid}


def sse_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A streamed answer's headers: the route's, and those of an SSE stream."""
    return {**headers, "Cache-Control": "no-cache", "X-Accel-Buffering": "no",
            "content-type": SSE}
