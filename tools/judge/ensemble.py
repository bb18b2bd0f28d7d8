"""python -m tools.judge.ensemble DEV_JSONL NAME=SCORES ... [--out FILE]

Would combining judges lift precision at the goal's recall? On dev only, from `dev_scores.json`
files of `tools.judge.sweep` (GPU logits, one variant each, no floor or rules): each judge
alone, and for every pair of them the mean and the minimum of their standardised logits; recall
at precision 0.99 / 0.95 / 0.90 and precision at recall 0.85.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import orjson

from tools.judge.cascade import scores


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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.judge.ensemble", description=__doc__)
    p.add_argument("dev", type=Path)
    p.add_argument("judges", nargs="+", metavar="NAME=SCORES")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    y = np.asarray([orjson.loads(x)["same"] for x in a.dev.read_bytes().splitlines() if x],
                   dtype=bool)
    z = {}
    for item in a.judges:
        name, _, path = item.partition("=")
        s = scores(Path(path))
        if len(s) != len(y):
            raise SystemExit(f"{path}: {len(s)} scores for {len(y)} pairs")
        z[name] = (s - s.mean()) / s.std()
    lines = [f"dev pairs: {len(y)} ({int(y.sum())} equal)", "",
             "| judge(s) | recall at precision 0.99 / 0.95 / 0.90 | precision at recall 0.85 |",
             "|---|---|---|"]
    lines += [row(name, y, s) for name, s in z.items()]
    for (n1, s1), (n2, s2) in itertools.combinations(z.items(), 2):
        lines.append(row(f"mean({n1}, {n2})", y, (s1 + s2) / 2))
        lines.append(row(f"min({n1}, {n2})", y, np.minimum(s1, s2)))
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if a.out:
        a.out.write_text(text)


if __name__ == "__main__":
    main()
