"""python -m tools.judge.devscore [MODEL_DIR]

The committed judge on dev only: AUC, and for scoring (a, b) alone, the mean of both orders,
or their minimum, with and without the hand-kept rules, behind floors 0.4 and 0.5: the
threshold the calibration picks at 1 %, and the best dev recall at precision >= 0.99 (an
optimistic ceiling: that threshold is chosen on dev itself).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from proxy.cache.calibrate import pick, table
from proxy.cache.judge import MODEL_DIR, Judge
from proxy.cache.verify import check
from tools.judge.train import cosines, load


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    judge = Judge.open(0.01, Path(args[0]) if args else MODEL_DIR, threads=2)
    dev = load(Path("tests/data/judge/dev.jsonl"))
    from sklearn.metrics import roc_auc_score

    ab = np.array(judge.logits([(p["a"], p["b"]) for p in dev]))
    ba = np.array(judge.logits([(p["b"], p["a"]) for p in dev]))
    y = np.array([bool(p["same"]) for p in dev])
    rules = np.array([check(p["a"], p["b"]).ok for p in dev])
    cos = np.array(cosines(dev))
    for name, sc in (("a,b", ab), ("mean of both orders", (ab + ba) / 2),
                     ("min of both orders", np.minimum(ab, ba))):
        for floor in (0.4, 0.5):
            for use_rules in (True, False):
                keep = (cos >= floor) & (rules if use_rules else True)
                s = np.where(keep, sc, -np.inf)
                rows = table(list(s), list(y), sorted(set(s[np.isfinite(s)].tolist())))
                best = max((r.hits - r.false_hits for r in rows
                            if r.hits and r.false_hits / r.hits <= 0.01), default=0)
                print(f"{name}, floor {floor}, rules {'on' if use_rules else 'off'}: "
                      f"auc {roc_auc_score(y, sc):.4f} threshold@1% {pick(rows, 0.01)} "
                      f"best recall at P>=0.99 {best / y.sum():.4f}")


if __name__ == "__main__":
    main()
