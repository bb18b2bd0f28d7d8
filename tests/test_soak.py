"""The soak script's CI size (bench/soak.py --quick: ~40 s, mock upstream): zero 5xx from the
proxy, bounded RSS growth, cache entries within the configured bound. It exits 1 otherwise."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.procs import REPO

pytestmark = pytest.mark.slow


def test_quick_soak_keeps_its_promises(tmp_path):
    out = tmp_path / "soak.json"
    r = subprocess.run([sys.executable, "-m", "bench.soak", "--quick", "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=280)
    assert r.returncode == 0, r.stdout + r.stderr
    figures = json.loads(out.read_text())
    assert figures["proxy_5xx"] == 0 and figures["requests"] > 300
    assert figures["cache_entries"] <= figures["cache_bound"]
    assert "rss_growth_mib" in r.stdout
