"""python -m tools.judge.cascade DEV_JSONL CHEAP_SCORES STRONG_SCORES [--strong-at T ...]

Would a cheap judge in front of the strong one cut the cost per candidate? On dev only: for each
threshold T of the strong judge, the cheap judge's threshold that keeps a share of the pairs the
strong one accepts, and the share of pairs that would still need the strong judge (what sets the
cost: above half, the p50 per candidate is still the strong judge's), with the cascade's
precision and recall beside the strong judge's alone. Scores: `dev_scores.json` files of
`tools.judge.sweep` (one variant each).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import orjson


def scores(path: Path) -> np.ndarray:
    found = orjson.loads(path.read_bytes())
    return np.asarray(next(iter(found.values())) if isinstance(found, dict) else found)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.judge.cascade", description=__doc__)
    p.add_argument("dev", type=Path)
    p.add_argument("cheap", type=Path)
    p.add_argument("strong", type=Path)
    p.add_argument("--strong-at", type=float, nargs="+", default=[3.25, 2.65, -1.7, -3.7])
    p.add_argument("--keep", type=float, nargs="+", default=[0.99, 0.995, 1.0])
    a = p.parse_args(argv)
    y = np.array([bool(orjson.loads(line)["same"]) for line in a.dev.read_bytes().splitlines()
                  if line.strip()])
    cheap, strong = scores(a.cheap), scores(a.strong)
    print(f"{len(y)} dev pairs; correlation of the two judges' logits "
          f"{np.corrcoef(cheap, strong)[0, 1]:.3f}")
    for t in a.strong_at:
        accepted = strong >= t
        for keep in a.keep:
            cut = float(np.quantile(cheap[accepted], 1 - keep)) if keep < 1 else \
                float(cheap[accepted].min())
            passed = cheap >= cut
            both = accepted & passed
            print(f"strong >= {t:g}: cheap >= {cut:.2f} keeps {keep:g} of its accepts; "
                  f"pairs needing the strong judge {passed.mean():.3f}; cascade P "
                  f"{y[both].mean():.3f} R {both[y].mean():.3f} (strong alone P "
                  f"{y[accepted].mean():.3f} R {accepted[y].mean():.3f})")


if __name__ == "__main__":
    main()
