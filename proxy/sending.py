"""Answers handed to the client's connection: JSON (PIECE bytes at a time) and SSE streams
(RelayResponse), each message under PROXY_SEND_TIMEOUT, and a request cut by the shutdown's
grace period answered in its API's shape. What goes into a stream is proxy/relay.py's (chat
and completions) or proxy/responses_sse.py's (/v1/responses)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio
from starlette.background import BackgroundTask
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from proxy.errors import ProxyError, ShuttingDown
from proxy.openai import JSON, error_content

SSE = "text/event-stream; charset=utf-8"  # as vLLM (and Starlette for text/*) sends it


def json_response(content: bytes, status: int = 200,
                  headers: Mapping[str, str] | None = None) -> Response:
    return Response(content, status, headers=headers, media_type=JSON)


def error_response(err: ProxyError, headers: Mapping[str, str] | None = None) -> Response:
    return json_response(error_content(err), err.status, {**err.headers, **(headers or {})})


def cut_by_shutdown(exc: asyncio.CancelledError) -> bool:
    """uvicorn cancels the requests still running when its graceful shutdown
    (PROXY_SHUTDOWN_TIMEOUT) is over, with this message; other cancellations are not ours to
    answer. When it is, the task's cancellation is taken back, so the answer can be sent."""
    if not any("graceful shutdown" in str(arg) for arg in exc.args):
        return False
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()
    return True


SHUTDOWN_CUT = ShuttingDown("the proxy is shutting down: this request was still running when "
                            "its shutdown grace period (PROXY_SHUTDOWN_TIMEOUT) ended")


def within(send: Send, timeout: float | None) -> Send:
    """send, with TimeoutError when a message cannot be handed over within timeout: a client
    that stops reading fills the socket buffer, and the server then blocks the send."""
    if timeout is None:
        return send

    async def bounded(message: Message) -> None:
        async with asyncio.timeout(timeout):
            await send(message)

    return bounded


PIECE = 1 << 16  # a JSON answer is handed over this much at a time


class JsonAnswer(Response):
    """A completion's JSON answer (fresh or cached), handed to the server PIECE bytes at a time,
    each under the streams' send timeout. Sent whole, it went into the connection's write buffer
    at once and stayed there for as long as a client that never reads kept the connection (a
    review: 33 MB a client); now such a client is cut, counted in proxy_send_timeouts_total,
    and the answer let go. The background work (the cache's store) starts with the sending,
    not after it, and is awaited however the sending ends."""

    def __init__(self, content: bytes, headers: Mapping[str, str] | None = None, *,
                 background: BackgroundTask | None = None, send_timeout: float | None = None,
                 on_send_timeout: Callable[[], None] | None = None,
                 on_sent: Callable[[bool], None] | None = None) -> None:
        super().__init__(content, headers=headers, media_type=JSON, background=background)
        self._send_timeout = send_timeout
        self._on_send_timeout = on_send_timeout
        self._on_sent = on_sent  # once, when the sending ends: True if all of it went

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        work = None if self.background is None else asyncio.ensure_future(self.background())
        bounded = within(send, self._send_timeout)
        body = self.body
        sent = False
        try:
            await bounded({"type": "http.response.start", "status": self.status_code,
                           "headers": self.raw_headers})
            at = 0
            while True:  # one message at least: an empty body too
                await bounded({"type": "http.response.body", "body": body[at:at + PIECE],
                               "more_body": at + PIECE < len(body)})
                at += PIECE
                if at >= len(body):
                    break
            sent = True
        except TimeoutError:
            if self._on_send_timeout is not None:
                self._on_send_timeout()
        finally:
            if self._on_sent is not None:
                self._on_sent(sent)
            if work is not None:
                await asyncio.shield(work)  # a cancelled caller (shutdown) leaves it running


def error_data(err: ProxyError) -> bytes:
    """A chat/completions stream's error event, as vLLM ends a failed stream."""
    return b"data: " + error_content(err) + b"\n\n"


class RelayResponse(StreamingResponse):
    """A stream whose on_close always runs once: finished, failed, or cut by the client
    (Starlette cancels the body iterator on disconnect, maybe before it ever started).
    last_words: the stream's error event in its API's shape, for a cut by the shutdown."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], Awaitable[None]],
                 headers: Mapping[str, str] | None = None, send_timeout: float | None = None,
                 on_send_timeout: Callable[[], None] | None = None,
                 last_words: Callable[[ProxyError], bytes] = error_data) -> None:
        super().__init__(content, headers=headers, media_type=SSE)
        self._on_close = on_close
        self._send_timeout = send_timeout
        self._on_send_timeout = on_send_timeout
        self._last_words = last_words

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:  # past the send timeout the stream is cut: upstream closed, slot freed
            await super().__call__(scope, receive, within(send, self._send_timeout))
        except TimeoutError:
            if self._on_send_timeout is not None:
                self._on_send_timeout()
        except asyncio.CancelledError as exc:
            if not cut_by_shutdown(exc):
                raise
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                # the headers are out: say why in the stream, then end it (no [DONE])
                await send({"type": "http.response.body", "more_body": False,
                            "body": self._last_words(SHUTDOWN_CUT)})
        finally:
            with anyio.CancelScope(shield=True):
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    await aclose()
                await self._on_close()
