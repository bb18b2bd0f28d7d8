"""Fairness against the real server stack (uvicorn + httptools, the loadtest mock upstream): a
client that never reads its stream loses it after PROXY_SEND_TIMEOUT; with API keys, one key's
stuck streams cannot take every admission slot."""

from __future__ import annotations

import socket

import httpx
import orjson

from proxy.settings import Settings
from tests.support.procs import ensure_tiny_model
from tests.support.reliability import Mock, Served, mock_upstream, served_proxy, wait_for

CHAT = "/v1/chat/completions"


def settings(mock: Mock, **kw: object) -> Settings:
    return Settings(**{"upstreams": (mock.url,), "cache": "off",  # type: ignore[arg-type]
                       "tokenizer": str(ensure_tiny_model()), "max_output_tokens": 200_000,
                       **kw})


def never_read(proxy: Served, key: str | None = None) -> socket.socket:
    """Open a stream of a long answer and never read a byte of it."""
    host, port = proxy.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    body = orjson.dumps({"model": "mock", "messages": [{"role": "user", "content": "go"}],
                         "stream": True, "max_tokens": 200_000})
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
