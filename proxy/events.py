"""Whole SSE events out of an upstream stream's chunks, for both relays (chat/completions in
proxy/relay.py, /v1/responses in proxy/responses_sse.py): the bytes after the last event
boundary (a blank line) wait for the rest of their event, at most `limit` of them
(PROXY_MAX_EVENT_BYTES). Before, an upstream that never ended an event was buffered without
bound, and each chunk copied the whole buffer again (found by a review); past the limit the
stream is now cut with an error event, and counted. The whole events that came before the
over-limit bytes, in the same chunk too, reach the client first (before, one chunk larger than
the limit lost them: the error was raised before they were returned)."""

from __future__ import annotations

from collections.abc import Callable

from proxy.errors import BadGateway

BOUNDARY = b"\n\n"


class EventTooLarge(BadGateway):
    pass


class EventBuffer:
    def __init__(self, limit: int, on_too_large: Callable[[], None] | None = None) -> None:
        self.limit = limit
        self._on_too_large = on_too_large  # once, when the limit cuts the stream
        self._parts: list[bytes] = []  # an unfinished event, as it came
        self._size = 0
        self._cut: EventTooLarge | None = None  # past the limit, behind the events returned

    def feed(self, chunk: bytes) -> bytes:
        """The whole events this chunk completes (b"" if none), the held bytes first; the
        chunk itself when it is whole events and nothing was held (no copy). Past the limit,
        EventTooLarge: at once when this chunk completes no event, else its whole events are
        returned and check() raises it (this method too, if called again)."""
        self.check()
        end = chunk.rfind(BOUNDARY)
        if end >= 0:
            cut = end + 2
        elif chunk[:1] == b"\n" and self._parts and self._parts[-1].endswith(b"\n"):
            cut = 1  # the blank line split between two chunks
        else:
            self._hold(chunk)
            return b""
        head = chunk if cut == len(chunk) else chunk[:cut]
        events = b"".join([*self._parts, head]) if self._parts else head
        self._parts.clear()
        self._size = 0
        try:
            self._hold(chunk[cut:])
        except EventTooLarge as exc:  # the events go first; the relay then cuts the stream
            self._cut = exc
        return events

    def check(self) -> None:
        """What a relay calls once it has sent what feed() returned: the stream's cut, if the
        event after those went past the limit."""
        if self._cut is not None:
            raise self._cut

    def rest(self) -> bytes:
        """What was held when the stream ended: no whole event."""
        return b"".join(self._parts)

    def clear(self) -> None:
        self._parts.clear()
        self._size = 0
        self._cut = None

    def _hold(self, piece: bytes) -> None:
        if not piece:
            return
        if self._size + len(piece) > self.limit:
            self.clear()
            if self._on_too_large is not None:
                self._on_too_large()
            raise EventTooLarge(
                f"the upstream sent more than {self.limit} bytes without ending an event "
                f"(the limit, PROXY_MAX_EVENT_BYTES): the stream is cut")
        self._parts.append(piece)
        self._size += len(piece)
