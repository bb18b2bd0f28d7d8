"""Client disconnects in every phase, against the real server stack (uvicorn + httptools) and a
real upstream socket (the loadtest mock, slow or hung): after each one, no upstream connection
is left open, no admission slot or wait is held, and the proxy's task count is back where it
was. (The same against a real vLLM, with its running count back to 0: test_faults_vllm.py.)"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest

from proxy.settings import Settings
from tests.support.procs import ensure_tiny_model
from tests.support.reliability import Mock, Served, mock_upstream, served_proxy
from tests.support.waiting import wait_for

CHAT = "/v1/chat/completions"


def body(text: str, **kw: object) -> dict[str, object]:
    return {"model": "mock", "messages": [{"role": "user", "content": text}], **kw}


def settings(mock: Mock, **kw: object) -> Settings:
    return Settings(**{"upstreams": (mock.url,), "cache": "off",  # type: ignore[arg-type]
                       "tokenizer": str(ensure_tiny_model()), "max_output_tokens": 50_000,
                       **kw})


def settled(proxy: Served, mock: Mock, baseline: int) -> None:
    wait_for(lambda: mock.connections() == 0, "upstream connections closed")
    wait_for(proxy.idle, "no slot held or waited for")
    wait_for(lambda: proxy.tasks() <= baseline, "proxy tasks back to the baseline")


@pytest.fixture
def hung() -> Iterator[tuple[Served, Mock]]:
    """An upstream that takes 60 s to the first token (headers come at once for streams)."""
    with mock_upstream(ttft=60.0) as mock, served_proxy(settings(mock)) as proxy:
        yield proxy, mock


def test_disconnect_before_the_upstream_answers_json(hung):
    proxy, mock = hung
    baseline = proxy.tasks()
    for i in range(5):
        with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(10, read=0.3)) \
                as c:
            c.post(proxy.url + CHAT, json=body(f"json {i}", max_tokens=4))
    settled(proxy, mock, baseline)


def test_disconnect_before_the_first_token_of_a_stream(hung):
    proxy, mock = hung
    baseline = proxy.tasks()
    for i in range(5):
        with httpx.Client(timeout=10) as c, c.stream(
                "POST", proxy.url + CHAT, json=body(f"stream {i}", stream=True)) as r:
            assert r.status_code == 200
            wait_for(lambda: mock.connections() >= 1, "upstream request open")
    settled(proxy, mock, baseline)


def test_disconnect_mid_stream():
    with mock_upstream(ttft=0.0, itl=0.05) as mock, served_proxy(settings(mock)) as proxy:
        baseline = proxy.tasks()
        for i in range(5):
            with httpx.Client(timeout=10) as c, c.stream(
                    "POST", proxy.url + CHAT,
                    json=body(f"mid {i}", stream=True, max_tokens=2000)) as r:
                lines = [line for _, line in zip(range(6), r.iter_lines(), strict=False)]
                assert lines[0].startswith("data: {")
        settled(proxy, mock, baseline)


def test_disconnect_during_a_cache_replay():
    with mock_upstream(ttft=0.0, itl=0.0) as mock, \
            served_proxy(settings(mock, cache="exact")) as proxy:
        big = body("replay me", stream=True, max_tokens=20_000)
        with httpx.Client(timeout=60) as c:
            first = c.post(proxy.url + CHAT, json=big)
            assert first.status_code == 200 and first.headers["x-cache"] == "MISS"
            baseline = proxy.tasks()
            for _ in range(5):
                with c.stream("POST", proxy.url + CHAT, json=big) as r:
                    assert r.headers["x-cache"] == "HIT"
                    for _, _line in zip(range(3), r.iter_lines(), strict=False):
                        pass
                c.close()  # the client's connection goes with it, mid-replay
                c = httpx.Client(timeout=60)
            ok = c.post(proxy.url + CHAT, json={**big, "stream": False})
            assert ok.status_code == 200 and ok.headers["x-cache"] == "HIT"
            c.close()
        settled(proxy, mock, baseline)


def _raw(proxy: Served) -> socket.socket:
    host, port = proxy.url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def test_disconnect_while_sending_the_body(hung, caplog):
    proxy, mock = hung
    baseline = proxy.tasks()
    payload = orjson.dumps(body("never finished"))
    for _ in range(5):
        with _raw(proxy) as s:
            s.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                      b"content-length: %d\r\n\r\n" % (CHAT.encode(), len(payload) + 100))
            s.sendall(payload[:20])
            time.sleep(0.1)
    settled(proxy, mock, baseline)
    assert mock.server.counters["mock_requests_total"] == 0  # nothing went upstream
    errors = [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
    assert not errors, [r.getMessage() for r in errors]
    metrics = httpx.get(proxy.url + "/metrics").text
    assert 'status="500"' not in metrics


def test_disconnect_while_waiting_for_an_admission_slot():
    with mock_upstream(ttft=60.0) as mock, served_proxy(settings(
            mock, max_inflight=1, max_waiting=8, queue_timeout=30)) as proxy:
        baseline = proxy.tasks()
        holder = httpx.Client(timeout=httpx.Timeout(60, read=None))
        with holder.stream("POST", proxy.url + CHAT, json=body("hold", stream=True)) as held:
            assert held.status_code == 200
            for stream in (False, True):
                with pytest.raises(httpx.ReadTimeout), httpx.Client(
                        timeout=httpx.Timeout(10, read=0.5)) as c:
                    c.post(proxy.url + CHAT, json=body("queued", stream=stream))
            # the queued requests leave the queue when their clients leave, not after 30 s
            wait_for(lambda: proxy.metric("proxy_waiting_requests") == 0, "queue emptied", 5)
        holder.close()
        settled(proxy, mock, baseline)
