"""Session 24, dev only: does the embedder's cosine break the judge's saturated top?

The shipped judge's logits saturate (s23/errors-mpnet-s12-dev.txt): thousands of dev pairs sit
within 0.02 of the top. Would `judge + w * cosine` (the MiniLM cosine the floor already reads)
order them well enough for the proxy's calibration to pass 1 %? Scores as the proxy acts on
them (floor 0.40, verify.check's rules), standardised logits; for each w: recall at precision
0.99, precision at recall 0.85, then tools.judge.ensemble.calibrated at 1/2/3/5/10 %.
Two logit sources: the GPU fp32 logits of session 21 (mpnet-s12) and the int8 model the proxy
serves, run here. Run from the repo root (~4 min, most of it the int8 judge and the cosines):

    PYTHONPATH=$PWD python docs/results/cache-judge/s24/tiebreak.py > docs/results/cache-judge/s24/tiebreak-dev.txt
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from proxy.cache.judge import Judge
from proxy.cache.verify import check
from tools.judge.ensemble import calibrated, judge_scores, precision_at, recall_at
from tools.judge.train import cosines, load

DEV = Path("tests/data/judge/dev.jsonl")
GPU = "docs/results/cache-judge/gpu-judge21/mpnet-s12/dev_scores.json"
WEIGHTS = (0.0, 0.05, 0.1, 0.2, 0.5, 1.0)


def standard(s: np.ndarray) -> np.ndarray:
    f = np.isfinite(s)
    return np.where(f, (s - s[f].mean()) / s[f].std(), -1e9)


def main() -> None:
    dev = load(DEV)
    y = np.array([p["same"] for p in dev])
    families = [p["family"] for p in dev]
    cos = np.array(cosines(dev))
    kept = np.array([check(p["a"], p["b"]).ok for p in dev]) & (cos >= 0.40)
    judge = Judge.open(0.01, Path("proxy/cache/judge_model"), threads=2)
    sources = {"gpu fp32 (mpnet-s12)": judge_scores(GPU, dev),
               "int8 as served": np.array(judge.logits([(p["a"], p["b"]) for p in dev]))}
    print("| logits | w | R@P0.99 | P@R0.85 | recall / precision at 1 % | 2 % | 3 % | 5 % | 10 % |")
    print("| --- | ---: | ---: | ---: | --- | --- | --- | --- | --- |")
    for name, logits in sources.items():
        z = standard(logits)
        for w in WEIGHTS:
            s = np.where(kept, z + w * cos, -1e9)
            cells = calibrated(y, s, families, [0.01, 0.02, 0.03, 0.05, 0.1])
            print(f"| {name} | {w:g} | {recall_at(y, s, 0.99):.3f} | "
                  f"{precision_at(y, s, 0.85):.3f} | {cells} |", flush=True)
    print(orjson.dumps({"pairs": len(dev), "kept": int(kept.sum())}).decode())


if __name__ == "__main__":
    main()
