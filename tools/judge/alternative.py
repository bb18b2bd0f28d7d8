"""python -m tools.judge.alternative [--data tests/data/judge]

The options the cross-encoder was chosen against, scored on dev only (test is not read):
- cosine: the bi-encoder's cosine alone, behind the same floor and rules;
- head: logistic regression on the bi-encoder's vectors (u*v, |u-v|, cosine) plus general
  features (the rules' verdicts, word overlap), trained on train.jsonl.
Prints, per option, the threshold the calibration picks for a 1% false-hit rate and the dev
recall / precision it gives, and the best dev recall at precision >= 0.99 (an optimistic
ceiling: that threshold is chosen on dev itself).
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from proxy.cache.calibrate import pick, table
from proxy.cache.verify import facts
from tools.judge.train import gated, load

_WORD = re.compile(r"[a-z0-9]+")


def summary(name: str, scores: list[float], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    same = [bool(p["same"]) for p in pairs]
    finite = sorted({s for s in scores if math.isfinite(s)})
    rows = table(scores, same, finite)
    t = pick(rows, 0.01)
    tp = sum(s >= t and y for s, y in zip(scores, same, strict=True))
    fp = sum(s >= t and not y for s, y in zip(scores, same, strict=True))
    pos = sum(same)
    best = max((r.hits - r.false_hits for r in rows
                if r.hits and r.false_hits / r.hits <= 0.01), default=0)
    out = {"option": name, "threshold": t, "recall": round(tp / pos, 4),
           "precision": round(tp / max(1, tp + fp), 4), "false_hits": fp,
           "best_recall_at_p99": round(best / pos, 4)}
    print(out, flush=True)
    return out


def features(pairs: list[dict[str, Any]], model: Any) -> npt.NDArray[np.float32]:
    a = model.encode([p["a"] for p in pairs], normalize_embeddings=True, batch_size=64)
    b = model.encode([p["b"] for p in pairs], normalize_embeddings=True, batch_size=64)
    extra = []
    for p in pairs:
        fa, fb = facts(p["a"]), facts(p["b"])
        wa, wb = set(_WORD.findall(p["a"].lower())), set(_WORD.findall(p["b"].lower()))
        extra.append([fa.numbers == fb.numbers, fa.months == fb.months,
                      (fa.negations > 0) == (fb.negations > 0),
                      len(wa & wb) / max(1, len(wa | wb)), abs(len(wa) - len(wb)) / 10])
    cos = (a * b).sum(axis=1, keepdims=True)
    return np.hstack([a * b, np.abs(a - b), cos, np.asarray(extra, dtype=np.float32)])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.judge.alternative")
    parser.add_argument("--data", type=Path, default=Path("tests/data/judge"))
    parser.add_argument("--floor", type=float, default=0.5)
    args = parser.parse_args(argv)
    from sentence_transformers import SentenceTransformer
    from sklearn.linear_model import LogisticRegression

    from proxy.cache.embedder import default_model_path

    model = SentenceTransformer(default_model_path(), device="cpu")
    train, dev = load(args.data / "train.jsonl"), load(args.data / "dev.jsonl")
    x_train, x_dev = features(train, model), features(dev, model)
    cos = [float(c) for c in x_dev[:, 768]]
    summary("cosine", gated(cos, cos, dev, args.floor), dev)
    summary("cosine, no rules", gated(cos, cos, dev, args.floor, rules=False), dev)
    head = LogisticRegression(C=1.0, max_iter=2000, random_state=0)
    head.fit(x_train, [bool(p["same"]) for p in train])
    logit = [float(v) for v in head.decision_function(x_dev)]
    summary("head", gated(logit, cos, dev, args.floor), dev)
    summary("head, no rules", gated(logit, cos, dev, args.floor, rules=False), dev)
    for floor in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
        kept = sum(c >= floor and p["same"] for c, p in zip(cos, dev, strict=True))
        share = kept / sum(p["same"] for p in dev)
        print(f"floor {floor}: dev positives at or above it {share:.3f}")


if __name__ == "__main__":
    main()
