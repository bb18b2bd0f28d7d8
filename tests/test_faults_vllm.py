"""Real faults against a real vLLM of its own (started once, SIGKILLed mid-stream, restarted
once: two vLLM starts for the module, ~2.5 min on the 2-core box).

One scenario, in order, on one proxy process that is never restarted:
  1. healthy: answers; client disconnects in each phase leave vLLM's running count at 0;
  2. vLLM killed while a stream is relayed: the client gets an OpenAI error event, then the
     stream closes (no [DONE]); nothing of the partial answer is cached;
  3. while vLLM is down: every request is a 502/503 OpenAI error, /ready says 503, quickly;
  4. vLLM restarted on the same port: requests succeed again with no proxy restart, the
     interrupted request is a cache MISS (then a HIT), and the proxy's gauges are back to 0.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.procs import Vllm, proxy_process, start_vllm
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# Tens of seconds of generation (max-model-len 32768 below): vLLM-CPU's API server on a busy
# 2-core box can stall for seconds while its engine goes on generating, so a 4000-token answer
# could end before a disconnect or a kill reaches vLLM.
LONG = {"model": "tiny", "max_tokens": 30000, "ignore_eos": True,
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


def completed(vllm: Vllm) -> float:
    """Requests vLLM has counted as finished for a reason other than an abort. vLLM 0.32 counts
    no client abort at all (its output processor drops an aborted request's stats), older ones
    count it under finished_reason="abort": neither is counted here."""
    text = httpx.get(vllm.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:request_success_total") and '"abort"' not in line)


def generated(vllm: Vllm) -> float:
    text = httpx.get(vllm.url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:generation_tokens_total"))


def proxy_gauge(proxy: str, name: str) -> float:
    for line in httpx.get(proxy + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(name)


def openai_error(r: httpx.Response) -> dict[str, object]:
    err = r.json()["error"]
    assert {"message", "type", "param", "code"} <= set(err), err
    return dict(err)


def restart(vllm: Vllm) -> Vllm:
    vllm.kill()
    restarted = start_vllm(port=vllm.port, extra=["max-model-len=32768"])
    vllm.proc = restarted.proc  # the fixture kills whatever runs at the end
    return restarted


def kill_mid_stream(c: httpx.Client, vllm: Vllm, body: dict[str, object]) -> list[str]:
    """SIGKILL vLLM once the first event of a long stream reached the client; return the
    events the client got, to the end of the stream the proxy closes."""
    events: list[str] = []
    with c.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        lines = r.iter_lines()
        for line in lines:
            if line:
                events.append(line)
                vllm.kill()
                break
        events += [line for line in lines if line]
    return events


@pytest.fixture(scope="module")
def own_vllm() -> Iterator[Vllm]:
    server = start_vllm(extra=["max-model-len=32768"])
    holder = [server]
    yield server
    for s in holder:
        s.kill()


@pytest.mark.timeout(1200)
def test_vllm_killed_mid_stream_then_restarted(own_vllm: Vllm) -> None:
    vllm = own_vllm
    # the proxy in its own process: in-thread, it shared the GIL with this test's clients
    with proxy_process(upstream=vllm.url, cache="exact", max_output_tokens="30000",
                       upstream_backoff="0.5", connect_timeout="2.0") as proxy, \
            httpx.Client(base_url=proxy, timeout=60) as c:
        # 1. healthy, and disconnects in every phase free vLLM's slot
        ok = c.post("/v1/chat/completions", json={**LONG, "max_tokens": 8})
        assert ok.status_code == 200 and ok.headers["x-cache"] == "MISS"
        for stream in (False, True):
            # vLLM's counters are published by its engine loop, not at once: wait until they
            # count the answered request and nothing runs
            wait_for(lambda: completed(vllm) >= 1 and running(vllm) == 0,
                     "vLLM counted the earlier requests", 180, every=0.2)
            done, tokens = completed(vllm), generated(vllm)
            body = {**LONG, "stream": stream,
                    "messages": [{"role": "user", "content": f"disconnect {stream}"}]}
            # vLLM-CPU on a busy 2-core box can hold a stream back for seconds and then send it
            # all at once: the client leaves after two events or 0.5 s of silence, whichever
            # comes first, long before vLLM could have generated 30000 tokens.
            with httpx.Client(base_url=proxy, timeout=httpx.Timeout(60, read=0.5)) as gone:
                if stream:  # headers are in, up to two events read: the client leaves
                    with contextlib.suppress(httpx.ReadTimeout), \
                            gone.stream("POST", "/v1/chat/completions", json=body) as r:
                        for _ in zip(range(2), r.iter_lines(), strict=False):
                            pass
                else:  # leaves before vLLM answered
                    with pytest.raises(httpx.ReadTimeout):
                        gone.post("/v1/chat/completions", json=body)
            # This VM can freeze processes for seconds (seen: a 0.5 s read timeout firing after
            # 4.7 s, a freed slot after 50 s), so the deadline is generous. What proves the
            # abort: the request left vLLM's running set without finishing for any other reason
            # (length, stop), short of the 30000 tokens it asked for.
            wait_for(lambda: running(vllm) == 0, "vLLM freed the disconnected request", 180,
                     every=0.2)
            made = generated(vllm) - tokens
            assert completed(vllm) == done, (stream, made)  # aborted, not run out
            assert finished(vllm, "length") == 1 and made < LONG["max_tokens"], (stream, made)
        # 2. kill vLLM while a stream is being relayed. If vLLM-CPU held the stream back and
        #    then sent all of it before the kill landed, the client sees [DONE]: that try tested
        #    nothing, so restart vLLM and try again.
        for attempt in range(3):
            killed = {**LONG, "stream": True,
                      "messages": [{"role": "user", "content": f"killed {attempt}"}]}
            events = kill_mid_stream(c, vllm, killed)
            if "data: [DONE]" not in events:
                break
            vllm = restart(own_vllm)
            wait_for(lambda: c.get("/ready").status_code == 200, "proxy ready again", 30,
                     every=0.2)
        else:
            raise AssertionError("vLLM always finished its answer before the kill landed")
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
        # /ready's answer is kept 1 s (proxy/readiness.py): a 200 from before the kill may
        # still be served within that second
        wait_for(lambda: c.get("/ready").status_code == 503, "/ready says 503", 5, every=0.2)
        assert c.get("/health").status_code == 200
        # 4. restart vLLM on the same port; the same proxy recovers by itself
        restarted = restart(own_vllm)
        wait_for(lambda: c.get("/ready").status_code == 200, "proxy ready again", 30,
                 every=0.2)
        codes = [c.post("/v1/chat/completions", json={**LONG, "max_tokens": 4}).status_code
                 for _ in range(3)]
        assert codes == [200, 200, 200]
        again = c.post("/v1/chat/completions", json=killed)
        assert again.status_code == 200
        assert again.headers["x-cache"] == "MISS"  # the cut stream left nothing in the cache
        assert again.text.endswith("data: [DONE]\n\n")
        hit = c.post("/v1/chat/completions", json=killed)
        assert hit.headers["x-cache"] == "HIT"
        wait_for(lambda: proxy_gauge(proxy, "proxy_inflight_requests") == 0, "no slot held", 10,
                 every=0.2)
        wait_for(lambda: running(restarted) == 0, "vLLM idle", 30, every=0.2)
