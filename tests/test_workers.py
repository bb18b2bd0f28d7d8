"""PROXY_WORKERS=2 behaves as one proxy on /metrics: counters summed over the workers, never
jumping back between scrapes (whichever worker answers)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.procs import ensure_tiny_model, proxy_process
from tests.support.reliability import mock_upstream

pytestmark = pytest.mark.slow  # two worker processes start: ~30 s on this VM

METRIC = 'proxy_requests_total{route="/v1/chat/completions",status="200"}'


def _count(text: str) -> float:
    for line in text.splitlines():
        if line.startswith(METRIC):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_counters_are_summed_over_workers_and_monotonic() -> None:
    body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with mock_upstream() as mock, proxy_process(
            upstream=mock.url, workers="2", cache="off",
            tokenizer=str(ensure_tiny_model())) as url:
        seen: list[float] = []
        sent = 0
        for _ in range(12):
            for _ in range(5):  # new connections: spread over both workers
                r = httpx.post(url + "/v1/chat/completions", json=body, timeout=30)
                assert r.status_code == 200
                sent += 1
            seen.append(_count(httpx.get(url + "/metrics", timeout=30).text))
        assert seen == sorted(seen), seen
        assert seen[-1] == sent
