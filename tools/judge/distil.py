"""python -m tools.judge.distil --base DIR --weights best.pt --teacher-out FILE [--device D]

Distilling the judge: the teacher's side. Loads a trained judge (the half-precision state dict
`tools.judge.sweep` saves, on the base it was trained from) and writes its logit for every pair
of train.jsonl and dev.jsonl, in both reading orders, to a teacher file. A student is then
trained against it by `python -m tools.judge.sweep --teacher scores.json [--alpha A]
[--temperature T]` (the loss: `tools.judge.train.distil_loss`). `tools.judge.sweep
--teacher-out scores.json` writes the same file straight after training the teacher.

The teacher file (JSON): {"source": ..., "splits": {"train": {"fingerprint": F, "pairs": N,
"ab": [...], "ba": [...]}, "dev": {...}}}: "ab" is the logit of (a, b) as the proxy serves,
"ba" of (b, a), 4 decimals; F a SHA-256 of the split's texts, labels and order, so a student
refuses a teacher file made from another corpus. test.jsonl is not read.

The teacher scores its own training pairs, so its train logits are more confident than on
unseen pairs (its dev logits are printed beside the student's for that reason);
`--temperature` above 1 softens them.
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tools.judge.train import PairScorer, load, score

SPLITS = ("train", "dev")


def fingerprint(pairs: list[dict[str, Any]]) -> str:
    """A SHA-256 of the pairs' texts and labels, in order."""
    h = hashlib.sha256()
    for p in pairs:
        h.update(orjson.dumps([p["a"], p["b"], bool(p["same"])]) + b"\n")
    return h.hexdigest()


def both_orders(model: Any, tok: Any, pairs: list[dict[str, Any]], device: str,
                ) -> dict[str, Any]:
    a, b = [p["a"] for p in pairs], [p["b"] for p in pairs]
    return {"fingerprint": fingerprint(pairs), "pairs": len(pairs),
            "ab": [round(x, 4) for x in score(model, tok, a, b, device)],
            "ba": [round(x, 4) for x in score(model, tok, b, a, device)]}


def write_teacher(path: Path, model: Any, tok: Any, splits: dict[str, list[dict[str, Any]]],
                  device: str, source: dict[str, str]) -> None:
    """The teacher file for `splits` (name -> pairs), scored by `model` (in eval mode)."""
    doc = {"source": source,
           "splits": {name: both_orders(model, tok, pairs, device)
                      for name, pairs in splits.items()}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(doc))


def read_teacher(path: Path, pairs: list[dict[str, Any]], split: str = "train",
                 ) -> list[tuple[float, float]]:
    """The teacher's (a-b, b-a) logits of each pair of `split`, in the order of `pairs`;
    ValueError when the file was made from other pairs."""
    doc = orjson.loads(path.read_bytes())
    part = doc["splits"].get(split)
    if part is None:
        raise ValueError(f"{path} has no {split} logits")
    if part["fingerprint"] != fingerprint(pairs) or len(part["ab"]) != len(pairs):
        raise ValueError(f"{path}: its {split} logits are of other pairs ({part['pairs']} "
                         f"pairs, fingerprint {part['fingerprint'][:12]}) than {split}.jsonl "
                         f"({len(pairs)} pairs, {fingerprint(pairs)[:12]}): score the teacher "
                         "again (python -m tools.judge.distil)")
    return [(float(x), float(y)) for x, y in zip(part["ab"], part["ba"], strict=True)]


def agreement(student: np.ndarray, teacher: np.ndarray) -> float:
    """Pearson correlation of two judges' logits of the same pairs (nan where one is
    constant)."""
    if student.std() == 0 or teacher.std() == 0:
        return float("nan")
    return float(np.corrcoef(student, teacher)[0, 1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m tools.judge.distil", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the encoder the teacher was trained from")
    ap.add_argument("--weights", type=Path, required=True,
                    help="the teacher's state dict (best.pt of tools.judge.sweep)")
    ap.add_argument("--pooling", choices=("mean", "cls"), default="mean")
    ap.add_argument("--data", type=Path, default=Path("tests/data/judge"))
    ap.add_argument("--teacher-out", type=Path, required=True)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.base)
    model = PairScorer.build(args.base, args.pooling)
    model.load_state_dict({k: v.float() for k, v in torch.load(args.weights).items()})
    model.to(args.device).eval()
    splits = {name: load(args.data / f"{name}.jsonl") for name in SPLITS}
    write_teacher(args.teacher_out, model, tok, splits, args.device,
                  {"base": str(args.base), "weights": str(args.weights),
                   "pooling": args.pooling})
    print(f"teacher logits of {sum(map(len, splits.values()))} pairs -> {args.teacher_out}")


if __name__ == "__main__":
    main()
