"""Graceful shutdown of `python -m proxy serve` (a real process, SIGTERM): it stops accepting at
once, lets in-flight streams finish, exits; a stream that would outlast the grace period is
cut when it ends (bounded), and the process still exits."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.procs import REPO, ensure_tiny_model, free_port, wait_http
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow
CHAT = "/v1/chat/completions"
# uvicorn re-raises the signal it caught once its graceful shutdown is done, so a clean exit
# after SIGTERM reads as "terminated by SIGTERM" (143 in a shell), or 0 on older uvicorns.
CLEAN = (0, -signal.SIGTERM)
GRACE = 5  # PROXY_SHUTDOWN_TIMEOUT, seconds


def spawn(args: list[str], env: dict[str, str], name: str) -> subprocess.Popen[bytes]:
    with open(Path(os.environ.get("TMPDIR", "/tmp")) / f"{name}-{os.getpid()}.log", "wb") as log:
        return subprocess.Popen([sys.executable, *args], cwd=REPO, env={**os.environ, **env},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


@pytest.fixture
def mock() -> Iterator[str]:
    port = free_port()
    proc = spawn(["-m", "loadtest", "mock", "--port", str(port), "--ttft-ms", "0",
                  "--itl-ms", "100"], {}, "mock")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", 60, proc)
        yield url
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def proxy(mock: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = spawn(["-m", "proxy", "serve"], {
        "PROXY_UPSTREAM": mock, "PROXY_PORT": str(port), "PROXY_CACHE": "off",
        "PROXY_TOKENIZER": str(ensure_tiny_model()), "PROXY_MAX_OUTPUT_TOKENS": "4000",
        "PROXY_SHUTDOWN_TIMEOUT": str(GRACE)},
        "proxy-shutdown")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", 120, proc)
        yield url, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stream_in_thread(url: str, tokens: int, out: dict[str, object],
                     stream: bool = True) -> threading.Thread:
    def run() -> None:
        body = {"model": "mock", "stream": stream, "max_tokens": tokens,
                "messages": [{"role": "user", "content": "shutdown"}]}
        try:
            with httpx.Client(timeout=60) as c, c.stream("POST", url + CHAT, json=body) as r:
                out["status"] = r.status_code
                out["text"] = "".join(r.iter_text())
        except httpx.HTTPError as exc:
            out["error"] = repr(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    wait_for(lambda: _in_flight(url), "the request in flight upstream")
    return t


def _in_flight(url: str) -> bool:
    lines = httpx.get(url + "/metrics", timeout=10).text.splitlines()
    return any(line.startswith("proxy_inflight_requests ") and float(line.split()[1]) >= 1
               for line in lines)


def _refusing(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sigterm_stops_accepting_finishes_streams_and_exits(proxy):
    url, proc = proxy
    out: dict[str, object] = {}
    t = stream_in_thread(url, 30, out)  # ~3 s of tokens
    proc.send_signal(signal.SIGTERM)
    wait_for(lambda: _refusing(url), "the listening socket closed", 2.0)
    with pytest.raises(httpx.ConnectError):  # no longer accepting
        httpx.post(url + CHAT, json={"model": "mock", "messages": [
            {"role": "user", "content": "late"}]}, timeout=5)
    t.join(30)
    assert out.get("status") == 200, out
    assert str(out["text"]).endswith("data: [DONE]\n\n")  # finished, not cut
    assert proc.wait(30) in CLEAN


def test_shutdown_is_bounded_when_a_stream_outlasts_the_grace_period(proxy):
    url, proc = proxy
    out: dict[str, object] = {}
    t = stream_in_thread(url, 3000, out)  # ~300 s of tokens
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(40)
    assert time.monotonic() - started < GRACE + 10
    assert code in (*CLEAN, 1), code
    t.join(10)
    text = str(out.get("text", ""))
    assert not text.endswith("data: [DONE]\n\n")  # cut, and the client is told why:
    last = json.loads(text.strip().split("\n\n")[-1].removeprefix("data: "))
    assert last["error"]["code"] == "shutting_down", text[-300:]


def test_a_json_request_cut_at_shutdown_is_an_openai_503(proxy):
    url, proc = proxy
    out: dict[str, object] = {}
    t = stream_in_thread(url, 3000, out, stream=False)  # answered after ~300 s
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(40) in (*CLEAN, 1)
    t.join(10)
    assert out.get("status") == 503, out  # not uvicorn's plain-text 500
    err = json.loads(str(out["text"]))["error"]
    assert err["code"] == "shutting_down" and "PROXY_SHUTDOWN_TIMEOUT" in err["message"]
