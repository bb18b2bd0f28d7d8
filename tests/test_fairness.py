"""Fairness against the real server stack (uvicorn + httptools, the loadtest mock upstream): a
client that never reads its stream, or its JSON answer, loses it after PROXY_SEND_TIMEOUT; with
API keys, one key's stuck streams cannot take every admission slot."""

from __future__ import annotations

import socket

import httpx
import orjson

from proxy.settings import Settings
from tests.support.procs import ensure_tiny_model
from tests.support.reliability import Mock, Served, mock_upstream, served_proxy
from tests.support.waiting import wait_for

CHAT = "/v1/chat/completions"


def settings(mock: Mock, **kw: object) -> Settings:
    return Settings(**{"upstreams": (mock.url,), "cache": "off",  # type: ignore[arg-type]
                       "tokenizer": str(ensure_tiny_model()), "max_output_tokens": 200_000,
                       **kw})


def never_read(proxy: Served, key: str | None = None, stream: bool = True) -> socket.socket:
    """Ask for a long answer (a stream, or JSON) and never read a byte of it."""
    host, port = proxy.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    body = orjson.dumps({"model": "mock", "messages": [{"role": "user", "content": "go"}],
                         "stream": stream, "max_tokens": 200_000})
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"{auth}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return sock


def test_a_stream_nobody_reads_is_cut_and_its_slot_freed() -> None:
    with mock_upstream() as mock, served_proxy(settings(mock, send_timeout=1.0)) as proxy:
        socks = [never_read(proxy) for _ in range(2)]
        try:
            wait_for(lambda: proxy.metric("proxy_send_timeouts_total") == 2,
                     "both stuck streams cut")
            wait_for(proxy.idle, "their admission slots freed")
            wait_for(lambda: mock.connections() == 0, "the upstream calls closed")
        finally:
            for s in socks:
                s.close()


def held_for(proxy: Served, sock: socket.socket) -> tuple[bool, int]:
    """The proxy's side of this client's connection: closing?, and the bytes it still holds
    for the client to read (its write buffer)."""
    async def look() -> tuple[bool, int]:
        for conn in proxy.server.server_state.connections:
            if conn.client == sock.getsockname():  # type: ignore[attr-defined]
                transport = conn.transport  # type: ignore[attr-defined]
                return transport.is_closing(), transport.get_write_buffer_size()
        raise AssertionError("no such connection")

    return proxy.lt.call(look())


def test_a_json_answer_nobody_reads_is_cut_and_let_go() -> None:
    # reported by a review: JSON answers had no send timeout; the whole body went into the
    # connection's write buffer at once, and stayed there for as long as a client that never
    # reads kept its connection (a 33 MB logprobs answer; 10 such clients: +450 MiB)
    with mock_upstream(output_tokens=2_000_000) as mock, \
            served_proxy(settings(mock, send_timeout=1.0)) as proxy:
        sock = never_read(proxy, stream=False)  # an answer of ~12 MB: more than the sockets take
        try:
            wait_for(lambda: proxy.metric("proxy_send_timeouts_total") == 1,
                     "the answer nobody reads cut at the send timeout", deadline=20)
            closing, held = held_for(proxy, sock)
            assert closing  # the proxy has let the connection go ...
            assert held < 1 << 20, held  # ... and holds at most a piece of the answer for it
            # ... and counts it as cut, once the sending ended (it was a 200 before it went)
            assert requests_with_status(proxy, "499") == 1
            assert requests_with_status(proxy, "200") == 0
        finally:
            sock.close()


def requests_with_status(proxy: Served, status: str) -> float:
    text = httpx.get(proxy.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("proxy_requests_total{") and f'status="{status}"' in line)


def test_one_keys_stuck_streams_leave_room_for_another_key() -> None:
    keys = ("key-a", "key-b")
    with mock_upstream() as mock:
        s = settings(mock, send_timeout=600.0, max_inflight=2, queue_timeout=0.5,
                     api_keys=keys)
        with served_proxy(s) as proxy:
            socks = [never_read(proxy, "key-b") for _ in range(2)]
            try:
                wait_for(lambda: proxy.metric("proxy_inflight_requests") == 1,
                         "b's first stream holds its one slot")
                r = httpx.post(proxy.url + CHAT, timeout=30, headers={
                    "Authorization": "Bearer key-a"}, json={
                    "model": "mock", "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 3})
                assert r.status_code == 200, r.text
                wait_for(lambda: proxy.metric("proxy_admission_rejected_total") == 1,
                         "b's second stream refused (b is at its share)")
            finally:
                for sock in socks:
                    sock.close()
