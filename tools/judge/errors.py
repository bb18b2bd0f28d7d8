"""python -m tools.judge.errors DEV_JSONL DEV_SCORES_JSON [VARIANT ...]

Where a judge's confident mistakes are, on dev only: for each variant's dev logits (the
`dev_scores.json` that `tools.judge.sweep` writes), the false hits among its N most confident
pairs by kind, and at the logit that keeps 85 % of the equal pairs (the issue's recall goal)
the precision and each kind's false hits out of its pairs. First, how saturated the logits
are: the pairs within 0.02 of the highest, which no threshold can tell apart.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tools.judge.train import load


def report(name: str, dev: list[dict[str, Any]], scores: np.ndarray) -> str:
    y = np.array([bool(p["same"]) for p in dev])
    order = np.argsort(-scores, kind="stable")
    top = scores >= scores.max() - 0.02
    lines = [f"{name} logits {scores.min():.2f} .. {scores.max():.2f}; within 0.02 of the top: "
             f"{top.sum()} pairs, precision {y[top].mean():.4f}, recall "
             f"{y[top].sum() / y.sum():.3f}"]
    for n in (200, 500, 1000):
        wrong = Counter(dev[i]["kind"] for i in order[:n] if not y[i])
        lines.append(f"{name} top {n}: {sum(wrong.values())} false hits "
                     f"{dict(wrong.most_common(6))}")
    cut = float(np.quantile(scores[y], 0.15))
    kept = scores >= cut
    negatives = Counter(p["kind"] for p, same in zip(dev, y, strict=True) if not same)
    wrong = Counter(p["kind"] for p, same, k in zip(dev, y, kept, strict=True) if k and not same)
    lines.append(f"{name} at recall 0.85 (logit {cut:.2f}): precision {y[kept].mean():.3f}, "
                 f"{sum(wrong.values())} false hits; by kind "
                 + ", ".join(f"{k} {wrong[k]}/{n}" for k, n in negatives.most_common()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.judge.errors")
    ap.add_argument("dev", type=Path)
    ap.add_argument("scores", type=Path)
    ap.add_argument("variants", nargs="*")
    args = ap.parse_args(argv)
    dev = load(args.dev)
    scores = orjson.loads(args.scores.read_bytes())
    for name in args.variants or list(scores):
        print(report(name, dev, np.array(scores[name], dtype=float)))


if __name__ == "__main__":
    main()
