"""python -m tools.judge.sweep --base DIR --device cuda --out DIR [--variants SPEC,...]

SPEC: E/LR/POOL/SEED/B[/S].

Trains several judge variants (epochs / learning rate / pooling / seed / batch, and optionally
label smoothing S: train.train's `smooth`) on train.jsonl
where training is cheap (a GPU: seconds per variant, where the CPU box needs ~45 minutes for
one) and scores each on dev only, as served (the (a, b) logit): AUC and the best dev recall at
precision 0.99 / 0.95 / 0.90. The variant with the best dev recall at precision 0.95 (then AUC)
is saved as a half-precision state dict, for `python -m tools.judge.train --weights` to export,
quantise and calibrate on the CPU box; every variant's dev logits go to dev_scores.json, and the
mean logit of the variants so far (an ensemble) is scored after each. test.jsonl is not read.

Distilling (tools/judge/distil.py): `--teacher-out FILE` also writes the best variant's logits
of every train and dev pair, both orders (the teacher file); `--teacher FILE` trains each
variant as a student of that file, loss `--alpha` * soft (BCE against sigmoid(teacher / T),
T = `--temperature`, times T^2) + (1 - alpha) * BCE against the labels (train.distil_loss),
and prints the teacher's own dev metrics first and each student's dev logit correlation with
the teacher's ("agree"). A student and a plain run of the same variant see the same batches.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tools.judge.distil import agreement, read_teacher, write_teacher
from tools.judge.ensemble import recall_at
from tools.judge.train import ALPHA, TEMPERATURE, load, score, train

DEFAULT = ("5/8e-5/mean/11/32,5/8e-5/mean/12/32,5/8e-5/mean/13/32,5/8e-5/cls/11/32,"
           "10/5e-5/mean/11/32,10/5e-5/cls/11/32,3/1.5e-4/mean/11/32,8/8e-5/mean/11/64,"
           "5/3e-5/mean/11/16,15/3e-5/mean/11/32")


def dev_scores(model: Any, tok: Any, dev: list[dict[str, Any]], device: str) -> np.ndarray:
    return np.array(score(model, tok, [p["a"] for p in dev], [p["b"] for p in dev], device))


def auc(scores: np.ndarray, y: np.ndarray) -> float:
    """The Mann-Whitney AUC, ties counted half (no scikit-learn on the GPU host)."""
    values, inverse = np.unique(scores, return_inverse=True)
    first = np.cumsum(np.bincount(inverse, minlength=len(values))) - np.bincount(inverse)
    ranks = first[inverse] + (np.bincount(inverse)[inverse] + 1) / 2  # mean rank of each tie
    pos = int(y.sum())
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * (len(y) - pos)))


def metrics(scores: np.ndarray, y: np.ndarray) -> dict[str, float]:
    cells = {"auc": auc(scores, y)}
    for p in (0.99, 0.95, 0.9):
        cells[f"recall_at_p{p:g}"] = recall_at(y, scores, p)
    return cells


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.judge.sweep")
    ap.add_argument("--base", required=True,
                    help="the encoder to start from (MiniLM or all-mpnet-base-v2, in fp16 or not)")
    ap.add_argument("--data", type=Path, default=Path("tests/data/judge"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--variants", default=DEFAULT)
    ap.add_argument("--teacher-out", type=Path, default=None,
                    help="write the best variant's train and dev logits here (a teacher file)")
    ap.add_argument("--teacher", type=Path, default=None,
                    help="a teacher file (tools.judge.distil): train students of it")
    ap.add_argument("--alpha", type=float, default=ALPHA,
                    help=f"with --teacher: the soft term's weight, 0..1 (1: teacher only, "
                         f"0: labels only; default {ALPHA})")
    ap.add_argument("--temperature", type=float, default=TEMPERATURE,
                    help=f"with --teacher: the soft term's temperature (default {TEMPERATURE})")
    args = ap.parse_args(argv)
    import torch

    if not 0 <= args.alpha <= 1 or args.temperature <= 0:
        ap.error("--alpha is 0..1 and --temperature above 0")
    args.out.mkdir(parents=True, exist_ok=True)
    pairs, dev = load(args.data / "train.jsonl"), load(args.data / "dev.jsonl")
    y = np.array([bool(p["same"]) for p in dev])
    teacher = teacher_dev = None
    distil: dict[str, Any] = {}
    if args.teacher is not None:
        teacher = read_teacher(args.teacher, pairs)
        teacher_dev = np.array([ab for ab, _ in read_teacher(args.teacher, dev, "dev")])
        distil = {"alpha": args.alpha, "temperature": args.temperature}
        print(orjson.dumps({"variant": f"teacher {args.teacher}", **metrics(teacher_dev, y)}
                           ).decode(), flush=True)
    rows: list[dict[str, Any]] = []
    scores: dict[str, list[float]] = {}
    best: tuple[float, float] = (-1.0, -1.0)
    for spec in args.variants.split(","):
        epochs, lr, pooling, seed, batch, *rest = spec.split("/")
        started = time.perf_counter()
        model, tok = train(pairs, int(seed), int(epochs), float(lr), int(batch),
                           device=args.device, base=args.base, pooling=pooling,
                           teacher=teacher, alpha=args.alpha, temperature=args.temperature,
                           smooth=float(rest[0]) if rest else 0.0)
        dev_s = dev_scores(model, tok, dev, args.device)
        scores[spec] = [round(float(x), 4) for x in dev_s]
        row = {"variant": spec, **distil, "seconds": round(time.perf_counter() - started, 1),
               **metrics(dev_s, y)}
        if teacher_dev is not None:
            row["agree"] = agreement(dev_s, teacher_dev)
        rows.append(row)
        print(orjson.dumps(row).decode(), flush=True)
        if len(scores) > 1:  # the mean logit of every variant so far, as one judge
            mean = np.mean([np.array(v) for v in scores.values()], axis=0)
            ens = {"variant": "mean of " + " + ".join(scores), **metrics(mean, y)}
            print(orjson.dumps(ens).decode(), flush=True)
        (args.out / "dev_scores.json").write_bytes(orjson.dumps(scores))
        key = (row["recall_at_p0.95"], row["auc"])
        if key > best:
            best = key
            torch.save({k: v.half().cpu() for k, v in model.state_dict().items()},
                       args.out / "best.pt")
            (args.out / "best.txt").write_text(spec + "\n")
            if args.teacher_out is not None:
                write_teacher(args.teacher_out, model, tok, {"train": pairs, "dev": dev},
                              args.device, {"base": str(args.base), "variant": spec})
    (args.out / "sweep.json").write_bytes(orjson.dumps(rows, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
