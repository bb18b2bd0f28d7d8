"""python -m tools.judge.kindbound DEV_JSONL SCORES [--rates 0.03,0.05,0.1,0.25] [--splits 20]

Does the calibrated bound hold on families calibration never saw, and would a bound per kind of
near miss hold better? On dev only: each split puts half of dev's families on one side (A), the
rest on the other (B). On A the threshold is picked two ways: as the proxy does
(`calibrate.table` with the family bootstrap, then `calibrate.pick`), and by the worst kind: the
same fixed sequence, but a threshold's bound is the largest, over the kinds of near miss, of the
95 % family-bootstrap quantile of the false-hit rate traffic would see if all its near misses were
of that kind (that kind's false accepts scaled to dev's share of near misses), so a bound that
holds for every kind holds for any mix of them. On B: the false-hit rate at dev's own mix
("natural"), the worst kind's, and recall. Scores: a `dev_scores.json` of `tools.judge.sweep`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import orjson

from proxy.cache.calibrate import pick, start_hits, table
from tools.judge.cascade import scores


def worst_kind_bounds(s: np.ndarray, same: np.ndarray, kind: np.ndarray, fam: np.ndarray,
                      thresholds: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Per threshold: the largest, over near-miss kinds, of the 95 % quantile (whole families
    resampled) of that kind's false-hit rate at dev's share of near misses."""
    names, fi = np.unique(fam, return_inverse=True)
    accepted = s[:, None] >= thresholds[None, :]

    def per_family(mask: np.ndarray) -> np.ndarray:
        out = np.zeros((len(names), *mask.shape[1:]))
        np.add.at(out, fi, mask)
        return out

    weights = np.random.default_rng(seed).multinomial(
        len(names), [1 / len(names)] * len(names), size=resamples)
    tp = weights @ per_family(accepted & same[:, None])
    near = weights @ per_family(~same)
    worst = np.zeros(len(thresholds))
    for k in np.unique(kind[~same]):
        of_kind = kind == k
        count = weights @ per_family(of_kind)
        scale = np.where(count > 0, near / np.maximum(count, 1), 0.0)
        fp = (weights @ per_family(accepted & of_kind[:, None])) * scale[:, None]
        rate = np.where(tp + fp > 0, fp / np.maximum(tp + fp, 1e-12), 1.0)
        worst = np.maximum(worst, np.quantile(rate, 0.95, axis=0))
    return worst


def fixed_sequence(thresholds: np.ndarray, bounds: np.ndarray, hits: np.ndarray,
                   rate: float) -> float:
    """`calibrate.pick`'s rule over precomputed bounds."""
    need, chosen = start_hits(rate), float("inf")
    for t, bound, n in sorted(zip(thresholds, bounds, hits, strict=True), key=lambda x: -x[0]):
        if n < need:
            continue
        if bound > rate:
            break
        chosen = float(t)
    return chosen


def served(s: np.ndarray, same: np.ndarray, kind: np.ndarray, t: float
           ) -> tuple[float, float, float]:
    """At threshold t: the false-hit rate at this mix, the worst kind's, recall."""
    accepted = s >= t
    tp, fp = float((accepted & same).sum()), float((accepted & ~same).sum())
    natural = fp / (tp + fp) if tp + fp else 0.0
    worst, near = 0.0, float((~same).sum())
    for k in np.unique(kind[~same]):
        of_kind = kind == k
        scaled = float((accepted & of_kind).sum()) * near / float(of_kind.sum())
        worst = max(worst, scaled / (tp + scaled) if tp + scaled else 0.0)
    return natural, worst, tp / float(same.sum())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.judge.kindbound", description=__doc__)
    p.add_argument("dev", type=Path)
    p.add_argument("scores", type=Path)
    p.add_argument("--rates", default="0.03,0.05,0.1,0.25")
    p.add_argument("--splits", type=int, default=20)
    p.add_argument("--resamples", type=int, default=400)
    a = p.parse_args(argv)
    rows = [orjson.loads(line) for line in a.dev.read_bytes().splitlines() if line.strip()]
    s = scores(a.scores)
    same = np.array([bool(r["same"]) for r in rows])
    kind = np.array([str(r["kind"]) for r in rows])
    fam = np.array([str(r["family"]) for r in rows])
    grid = np.quantile(s, np.linspace(0.3, 0.995, 120))
    rates = [float(x) for x in a.rates.split(",")]
    found: dict[tuple[float, str], list[tuple[float, float, float, float]]] = {
        (r, how): [] for r in rates for how in ("proxy", "worst kind")}
    for split in range(a.splits):
        names = np.unique(fam)
        side_a = np.isin(fam, np.random.default_rng(1000 + split).choice(
            names, len(names) // 2, replace=False))
        b = ~side_a
        rows_a = table(s[side_a].tolist(), same[side_a].tolist(), grid.tolist(),
                       families=fam[side_a].tolist(), resamples=a.resamples, seed=split)
        worst = worst_kind_bounds(s[side_a], same[side_a], kind[side_a], fam[side_a], grid,
                                  a.resamples, split)
        hits = np.array([(s[side_a] >= t).sum() for t in grid])
        for r in rates:
            for how, t in (("proxy", pick(rows_a, r)),
                           ("worst kind", fixed_sequence(grid, worst, hits, r))):
                found[(r, how)].append(
                    (t, *served(s[b], same[b], kind[b], t)) if np.isfinite(t)
                    else (t, 0.0, 0.0, 0.0))
    print(f"{len(rows)} dev pairs in {len(np.unique(fam))} families; {a.splits} splits of the "
          "families in halves, calibrated on A, served on B")
    print("| rate | threshold picked by | splits where one passed | B's false-hit rate > rate "
          "(dev's mix) | mean B false-hit rate (dev's mix / worst kind) | mean B recall |")
    print("| --- | --- | ---: | ---: | --- | ---: |")
    for (r, how), got in found.items():
        arr = np.array(got, dtype=float)
        ok = np.isfinite(arr[:, 0])
        if not ok.any():
            print(f"| {r:g} | {how} | 0 of {len(arr)} | – | – | 0.000 |")
            continue
        over = int((arr[ok, 1] > r).sum())
        print(f"| {r:g} | {how} | {int(ok.sum())} of {len(arr)} | {over} of {int(ok.sum())} | "
              f"{arr[ok, 1].mean():.3f} / {arr[ok, 2].mean():.3f} | {arr[ok, 3].mean():.3f} |")


if __name__ == "__main__":
    main()
