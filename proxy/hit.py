"""A cache hit answered with no upstream request: a stored JSON answer sent as it was, a
stored stream replayed as vLLM's chunks, or an identical stream still in flight followed live
(counted out of its flight however the response ends)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson
from starlette.responses import Response

from proxy.headers import sse_headers
from proxy.relay import followed, replay_stream
from proxy.sending import JsonAnswer, RelayResponse
from proxy.sse import replay, response_id
from proxy.trace import Finisher, Trace
from proxy.types import CacheResult, Kind


def answer_hit(kind: Kind, result: CacheResult, stream: bool, usage: bool,
               headers: dict[str, str], trace: Trace, finish: Finisher) -> Response:
    """usage: the client asked for the usage chunk (a stream's is dropped otherwise)."""
    headers["X-Cache-Tier"] = result.tier or "exact"
    if result.similarity is not None:
        headers["X-Cache-Similarity"] = f"{result.similarity:.4f}"
    trace.tokens_out = 0
    events: AsyncIterator[bytes]
    leave = None
    if result.live is not None:  # an identical stream in flight (only streams follow one)
        live = result.live
        events = followed(kind, live, usage, trace.rid)

        async def leave() -> None:  # counted out of the flight however the response ends
            live.leave()
    elif not stream:
        assert result.answer is not None
        answer = {**result.answer, "id": response_id(kind, trace.rid)}  # as a miss's
        return JsonAnswer(orjson.dumps(answer), headers, **finish.send_limits(),
                          on_sent=finish.sent(trace))
    else:  # a stream's hit is always vLLM's chunks (cache/serve.py: answered)
        assert result.events is not None
        events = replay_stream(replay(kind, usage, result.events, trace.rid))
    return RelayResponse(events, finish.closer(trace, leave), headers=sse_headers(headers),
                         **finish.send_limits())
