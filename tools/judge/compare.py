"""python -m tools.judge.compare MODEL_DIR [MODEL_DIR ...]

Judges side by side on dev only (test is not read): AUC of the (a, b) logit as served, the
best dev recall at precision 0.99 / 0.95 / 0.90 / 0.80 (thresholds chosen on dev itself:
ceilings, not promises), the most confident false hits, and the threshold each bound gets.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from proxy.cache.judge import Judge
from tools.judge.train import load


def main(argv: list[str] | None = None) -> None:
    dev = load(Path("tests/data/judge/dev.jsonl"))
    y = np.array([bool(p["same"]) for p in dev])
    from sklearn.metrics import roc_auc_score

    for path in sys.argv[1:] if argv is None else argv:
        judge = Judge.open(0.01, Path(path), threads=2)
        # identical texts score +inf (judge.py); ranked first, finite for the AUC
        s = np.nan_to_num(np.array(judge.logits([(p["a"], p["b"]) for p in dev])),
                          posinf=1e9, neginf=-1e9)
        order = np.argsort(-s, kind="stable")
        tp = np.cumsum(y[order])
        precision = tp / np.arange(1, len(s) + 1)
        cells = []
        for p in (0.99, 0.95, 0.9, 0.8):
            ok = np.flatnonzero(precision >= p)
            cells.append(f"R@P{p:g}={tp[ok.max()] / y.sum() if len(ok) else 0.0:.3f}")
        print(path, f"auc={roc_auc_score(y, s):.4f}", " ".join(cells))
        for i in [i for i in order[:80] if not y[i]][:8]:
            print(f"  false {s[i]:.2f} {dev[i]['kind']}: {dev[i]['a']!r} / {dev[i]['b']!r}")
        for rate in (0.01, 0.05, 0.1, 0.25):
            bound = Judge(judge.session, judge.tokenizer, judge.rows, rate, 128, judge.floor)
            print(f"  bound {rate:g}: threshold {bound.threshold}")
            bound.close()
        judge.close()


if __name__ == "__main__":
    main()
