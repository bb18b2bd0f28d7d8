"""python -m tools.judge.folds split|merge ...: an out-of-fold teacher for distilling the judge.

A teacher scores the pairs it was trained on more confidently than unseen ones, so a student of
its train logits learns that overconfidence. Out of fold: train.jsonl's families are cut into k
folds; teacher i trains on every fold but i and scores fold i, which it never saw.

  split DATA OUT [--k 2] [--seed 0]
      OUT/fold{i}/train.jsonl: train.jsonl without fold i's families; OUT/fold{i}/dev.jsonl:
      fold i's pairs, in train.jsonl's order. Train teacher i on OUT/fold{i} with
      `tools.judge.sweep --data OUT/fold{i} --teacher-out OUT/fold{i}/teacher.json` (its
      "dev" logits are then out of fold). test.jsonl is not read.
  merge DATA OUT --dev-teacher FILE --out FILE
      One teacher file for DATA's train and dev: each train pair's logits from the teacher that
      did not train on it, dev's from FILE (a teacher of all of train: the out-of-fold
      teachers never scored dev). The file passes `distil.read_teacher` for DATA as it is.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import orjson

from tools.judge.distil import fingerprint, read_teacher
from tools.judge.train import load


def assign(pairs: list[dict[str, Any]], k: int, seed: int) -> dict[str, int]:
    """Each family's fold: the families shuffled with `seed`, then dealt round robin."""
    families = sorted({p["family"] for p in pairs})
    random.Random(seed).shuffle(families)
    return {f: i % k for i, f in enumerate(families)}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def split(data: Path, out: Path, k: int, seed: int) -> None:
    pairs = load(data / "train.jsonl")
    fold = assign(pairs, k, seed)
    (out).mkdir(parents=True, exist_ok=True)
    (out / "folds.json").write_bytes(orjson.dumps(
        {"k": k, "seed": seed, "train": fingerprint(pairs), "fold": fold}))
    for i in range(k):
        write_jsonl(out / f"fold{i}" / "train.jsonl", [p for p in pairs if fold[p["family"]] != i])
        write_jsonl(out / f"fold{i}" / "dev.jsonl", [p for p in pairs if fold[p["family"]] == i])
        print(f"fold{i}: trains on {sum(fold[p['family']] != i for p in pairs)} pairs, "
              f"scores {sum(fold[p['family']] == i for p in pairs)}")


def merge(data: Path, out: Path, dev_teacher: Path) -> dict[str, Any]:
    """The out-of-fold teacher document for `data` (see the module's doc)."""
    pairs, dev = load(data / "train.jsonl"), load(data / "dev.jsonl")
    plan = orjson.loads((out / "folds.json").read_bytes())
    if plan["train"] != fingerprint(pairs):
        raise ValueError(f"{out} was split from another train.jsonl than {data}'s")
    fold: dict[str, int] = plan["fold"]
    if {p["family"] for p in pairs} != set(fold):
        raise ValueError(f"{out}/folds.json assigns other families than {data}'s train.jsonl")
    scored = [read_teacher(out / f"fold{i}" / "teacher.json",
                           load(out / f"fold{i}" / "dev.jsonl"), "dev") for i in range(plan["k"])]
    for i, logits in enumerate(scored):
        if len(logits) != sum(fold[p["family"]] == i for p in pairs):
            raise ValueError(f"fold{i} scored {len(logits)} pairs, not its share of train")
    taken = [iter(logits) for logits in scored]
    train = [next(taken[fold[p["family"]]]) for p in pairs]
    dev_logits = read_teacher(dev_teacher, dev, "dev")

    def part(rows: list[dict[str, Any]], logits: list[tuple[float, float]]) -> dict[str, Any]:
        return {"fingerprint": fingerprint(rows), "pairs": len(rows),
                "ab": [ab for ab, _ in logits], "ba": [ba for _, ba in logits]}

    return {"source": {"out_of_fold": str(out), "k": plan["k"], "seed": plan["seed"],
                       "dev": str(dev_teacher)},
            "splits": {"train": part(pairs, train), "dev": part(dev, dev_logits)}}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.judge.folds", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("split")
    s.add_argument("data", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--k", type=int, default=2)
    s.add_argument("--seed", type=int, default=0)
    m = sub.add_parser("merge")
    m.add_argument("data", type=Path)
    m.add_argument("out", type=Path)
    m.add_argument("--dev-teacher", type=Path, required=True)
    m.add_argument("--out", dest="merged", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.command == "split":
        if args.k < 2:
            ap.error("--k is at least 2")
        split(args.data, args.out, args.k, args.seed)
    else:
        try:
            doc = merge(args.data, args.out, args.dev_teacher)
        except (ValueError, OSError) as e:
            raise SystemExit(f"tools.judge.folds merge: {e}") from e
        args.merged.write_bytes(orjson.dumps(doc))
        print(f"out-of-fold teacher: {doc['splits']['train']['pairs']} train pairs, "
              f"{doc['splits']['dev']['pairs']} dev -> {args.merged}")


if __name__ == "__main__":
    main()
