"""bench.overhead's ratios, from made-up results (no servers)."""

from __future__ import annotations

from typing import Any

from bench.overhead import report


def _runs(scale: float) -> dict[str, Any]:
    one = {"ttft_p50_ms": 1.0, "ttft_p99_ms": 2.0, "e2el_p50_ms": 1.0, "e2el_p99_ms": 2.0,
           "rps": 100.0}
    return {run: {k: v * scale for k, v in one.items()}
            for run in ("json_c1", "json_sat", "stream_c1", "stream_c16")}


def test_each_ratio_is_reported_when_both_of_its_targets_ran() -> None:
    # added = target - direct: direct 1x, bare 2x (adds 1x), ours 3x (adds 2x), ours-2w 5x
    ratios = report({"direct": _runs(1), "bare": _runs(2), "ours": _runs(3),
                     "ours-2w": _runs(5)})["ratios"]
    assert ratios == {"ours/bare added json c1 p50": "2.00x", "ours/bare max rps": "1.50x",
                      "ours/bare added ttft c16 p50": "2.00x",
                      "ours 2 workers / 1 worker max rps": "1.67x"}
