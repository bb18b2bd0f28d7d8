"""TTFT p90 ratios between routing policies from the per-request files of bench/routing_gpu.py,
with a bootstrap interval over the pooled requests (it shows the spread of the requests within
the runs, not between runs: give it beside the per-run values, never instead of repeats).

    python -m bench.routing_pooled docs/routing-results/gpu-h200x2/rate60
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import numpy as np


def ttfts(folder: Path, case: str, policy: str) -> list[np.ndarray]:
    runs = []
    for f in sorted(folder.glob(f"{case}-{policy}-*.requests.jsonl.gz")):
        with gzip.open(f, "rt") as fh:
            rows = [json.loads(line) for line in fh]
        runs.append(np.array([r["ttft"] for r in rows if r["success"]]))
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing_pooled", description=__doc__)
    p.add_argument("folder", type=Path)
    p.add_argument("--baseline", default="least-loaded")
    p.add_argument("--resamples", type=int, default=2000)
    a = p.parse_args(argv)
    rng = np.random.default_rng(0)
    for case in ("tenants", "hotspot"):
        base = ttfts(a.folder, case, a.baseline)
        for policy in ("prefix", "session", "kv-events"):
            runs = ttfts(a.folder, case, policy)
            if not base or not runs:
                continue
            b, x = np.concatenate(base), np.concatenate(runs)
            boot = [np.percentile(rng.choice(b, len(b)), 90)
                    / np.percentile(rng.choice(x, len(x)), 90) for _ in range(a.resamples)]
            lo, hi = np.percentile(boot, [2.5, 97.5])
            per_run = [f"{np.percentile(v, 90) * 1000:.1f}" for v in base]
            per_pol = [f"{np.percentile(v, 90) * 1000:.1f}" for v in runs]
            print(f"{case}: TTFT p90 {a.baseline}/{policy} = "
                  f"{np.percentile(b, 90) / np.percentile(x, 90):.2f}x [{lo:.2f}-{hi:.2f}] "
                  f"(runs: {a.baseline} {', '.join(per_run)} ms; {policy} "
                  f"{', '.join(per_pol)} ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
