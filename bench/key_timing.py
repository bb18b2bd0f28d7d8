"""API-key check timing: wrong keys that share a long prefix with a real key must cost the same
as keys that share nothing, so timing cannot guide a byte-by-byte search.

    python -m bench.key_timing [--rounds 3000] [--json docs/results/key-timing.json]

Interleaved runs, medians of many samples, printed as ratios to the "near miss" key. The
guarantee itself is tested by construction (tests/test_security.py: every token is compared as
a fixed-length digest); this measures it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

from proxy.errors import Unauthorized
from proxy.receive import KeyRing

KEYS = ("key-alpha-0123456789", "k2", "key-gamma-" + "z" * 40)


class _Req:
    def __init__(self, auth: str) -> None:
        self.headers = {"authorization": auth}


def measure(rounds: int) -> dict[str, float]:
    ring = KeyRing(KEYS)
    reqs = {"near": _Req(f"Bearer {KEYS[2][:-1]}?"), "prefix": _Req(f"Bearer {KEYS[2][:30]}"),
            "other": _Req("Bearer " + "q" * len(KEYS[2])), "short": _Req("Bearer q"),
            "long": _Req("Bearer " + "q" * 4096)}
    samples: dict[str, list[int]] = {k: [] for k in reqs}
    for _ in range(rounds):
        for name, req in reqs.items():
            t = time.perf_counter_ns()
            with contextlib.suppress(Unauthorized):
                ring.tenant(req)  # type: ignore[arg-type]
            samples[name].append(time.perf_counter_ns() - t)
    return {k: float(statistics.median(v)) for k, v in samples.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.key_timing")
    ap.add_argument("--rounds", type=int, default=3000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    med = measure(args.rounds)
    ratios = {k: v / med["near"] for k, v in med.items()}
    for name, ns in med.items():
        print(f"{name:7s} median {ns:8.0f} ns   x{ratios[name]:.2f} of near-miss")
    held = all(1 / 1.5 < ratios[k] < 1.5 for k in ("prefix", "other", "short"))
    verdict = "held" if held else "BROKEN"
    print("same cost for near-miss, prefix, unrelated and short keys:", verdict)
    if args.json:
        args.json.write_text(json.dumps({"rounds": args.rounds, "median_ns": med,
                                         "ratio_to_near": ratios, "held": held}, indent=1))


if __name__ == "__main__":
    main()
