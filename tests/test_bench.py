"""Each bench script runs end to end in its tiny --quick mode (output shape, never speed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.procs import REPO, Vllm

pytestmark = pytest.mark.slow


def run(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_overhead_quick(tmp_path: Path) -> None:
    out = run("bench.overhead", "--quick", "--no-litellm", "--json", str(tmp_path / "o.json"),
              "--plots", str(tmp_path))
    doc = json.loads((tmp_path / "o.json").read_text())
    assert set(doc["results"]) == {"direct", "bare", "ours"}
    for target in ("direct", "bare", "ours"):
        for run_name in ("json_c1", "json_sat", "stream_c1", "stream_c16"):
            s = doc["results"][target][run_name]
            assert s["n"] > 0 and s["errors"] == 0 and s["e2el_p50_ms"] > 0
    assert "ours/bare max rps" in doc["ratios"] and "ratios" in out
    assert (tmp_path / "overhead-latency.png").stat().st_size > 0


def test_bare_proxy_is_short() -> None:
    lines = (REPO / "bench" / "bare_proxy.py").read_text().splitlines()
    assert len(lines) <= 70


def test_cache_cost_quick(tmp_path: Path) -> None:
    out = run("bench.cache_cost", "--quick", "--json", str(tmp_path / "c.json"),
              "--plots", str(tmp_path))
    doc = json.loads((tmp_path / "c.json").read_text())
    px = doc["proxy"]
    assert px["exact_hit_c1"]["n"] > 0  # stored questions come back as exact hits
    runs = [px[f"miss_50rps_ttft30_cache_{m}"]["n"]
            for m in ("off", "semantic", "semantic_nohedge")]
    assert runs[0] == runs[1] == runs[2] > 0
    assert {"batching_on_c32", "batching_on_wait2ms_c32", "batching_off_c32"} <= set(doc["embed"])
    assert doc["index"]["hnsw_2000"]["recall_at_1"] > 0.5
    assert "exact hit p50 at c1 (ms)" in doc["ratios"] and "ratios" in out
    assert (tmp_path / "cache-hits.png").exists()


@pytest.mark.vllm
def test_fullstack_quick(tmp_path: Path, vllm: Vllm) -> None:
    out = run("bench.fullstack", "--quick", "--vllm", vllm.url, "--out", str(tmp_path))
    for wl in ("reference", "cachemix"):
        for target in ("vllm", "proxy-cache-off", "proxy-cache-on"):
            doc = json.loads((tmp_path / f"{wl}-{target}.json").read_text())
            assert doc  # a loadtest result
        assert any((tmp_path / wl).iterdir())  # compare's table, plots, report
    assert "cachemix" in out
