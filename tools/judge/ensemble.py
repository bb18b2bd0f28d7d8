"""python -m tools.judge.ensemble DEV_JSONL NAME=SCORES ... [--out FILE]

Would combining judges lift precision at the goal's recall? On dev only, from `dev_scores.json`
files of `tools.judge.sweep` (GPU logits, one variant each, no floor or rules): each judge
alone, and for every pair of them the mean and the minimum of their standardised logits; recall
at precision 0.99 / 0.95 / 0.90 and precision at recall 0.85.

`--rates R ...` adds what the proxy's calibration (proxy/cache/calibrate.py: the family
bootstrap and the fixed sequence, as `tools.judge.train` calibrates) would make of each row on
dev: for each false-hit rate, the dev recall and precision at the threshold it picks
(raw logits, no floor or rules: an estimate of the served table, not the table). SCORES may
also be a teacher file's order, `teacher.json@ab` or `@ba` (tools.judge.distil; its dev
logits, checked against DEV).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import orjson

from proxy.cache import calibrate
from tools.judge.cascade import scores
from tools.judge.distil import read_teacher

# the thresholds tried, on the standardised logits every row is scored in (about -3..3)
GRID = np.round(np.arange(-12.0, 12.0, 0.01), 2)


def recall_at(y: np.ndarray, s: np.ndarray, precision: float) -> float:
    hits = np.cumsum(y[np.argsort(-s, kind="stable")])
    ok = np.nonzero(hits / np.arange(1, len(s) + 1) >= precision)[0]
    return float(hits[ok.max()] / y.sum()) if len(ok) else 0.0


def precision_at(y: np.ndarray, s: np.ndarray, recall: float) -> float:
    hits = np.cumsum(y[np.argsort(-s, kind="stable")])
    i = int(np.argmax(hits / y.sum() >= recall))
    return float(hits[i] / (i + 1))


def row(name: str, y: np.ndarray, s: np.ndarray) -> str:
    r = " / ".join(f"{recall_at(y, s, p):.3f}" for p in (0.99, 0.95, 0.90))
    return f"| {name} | {r} | {precision_at(y, s, 0.85):.3f} |"


def judge_scores(spec: str, dev: list[dict[str, object]]) -> np.ndarray:
    """A dev_scores.json's logits, or a teacher file's dev logits in one order (`FILE@ab`)."""
    path, _, order = spec.partition("@")
    if not order:
        return scores(Path(path))
    if order not in ("ab", "ba"):
        raise SystemExit(f"{spec}: the order after @ is ab or ba")
    logits = read_teacher(Path(path), dev, "dev")
    return np.asarray([pair[0 if order == "ab" else 1] for pair in logits])


def calibrated(y: np.ndarray, s: np.ndarray, families: list[str], rates: list[float]) -> str:
    """Per rate: dev recall / precision at the threshold the proxy's rule picks on these
    logits ("none": no threshold promises the rate)."""
    rows = calibrate.table(s.tolist(), y.tolist(), GRID.tolist(), families=families)
    cells = []
    for rate in rates:
        t = calibrate.pick(rows, rate)
        served = s >= t
        cells.append("none" if not served.any() else
                      f"{y[served].sum() / y.sum():.3f} / {y[served].mean():.4f}")
    return " | ".join(cells)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.judge.ensemble", description=__doc__)
    p.add_argument("dev", type=Path)
    p.add_argument("judges", nargs="+", metavar="NAME=SCORES")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--rates", type=float, nargs="+", default=[],
                   help="also the proxy's calibration on dev at these false-hit rates")
    a = p.parse_args(argv)
    dev = [orjson.loads(x) for x in a.dev.read_bytes().splitlines() if x.strip()]
    y = np.asarray([d["same"] for d in dev], dtype=bool)
    z = {}
    for item in a.judges:
        name, _, path = item.partition("=")
        s = judge_scores(path, dev)
        if len(s) != len(y):
            raise SystemExit(f"{path}: {len(s)} scores for {len(y)} pairs")
        z[name] = (s - s.mean()) / s.std()
    lines = [f"dev pairs: {len(y)} ({int(y.sum())} equal)", "",
             "| judge(s) | recall at precision 0.99 / 0.95 / 0.90 | precision at recall 0.85 |",
             "|---|---|---|"]
    combined = dict(z)
    for (n1, s1), (n2, s2) in itertools.combinations(z.items(), 2):
        combined[f"mean({n1}, {n2})"] = (s1 + s2) / 2
        combined[f"min({n1}, {n2})"] = np.minimum(s1, s2)
    lines += [row(name, y, s) for name, s in combined.items()]
    if a.rates:
        families = [str(d.get("family", i)) for i, d in enumerate(dev)]
        lines += ["", "The proxy's calibration on dev (recall / precision at the threshold "
                  "picked for each rate):", "",
                  "| judge(s) | " + " | ".join(f"{r:g}" for r in a.rates) + " |",
                  "|---|" + "---|" * len(a.rates)]
        lines += [f"| {name} | {calibrated(y, s, families, a.rates)} |"
                  for name, s in combined.items()]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
