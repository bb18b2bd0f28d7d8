"""python -m tools.judge.summary DIR

One row per judge training under DIR (each run's `sweep.json`, as tools.judge.sweep writes it):
dev AUC and recall at precision 0.99 / 0.95 / 0.90, a student's alpha, temperature and
agreement with its teacher, the seconds it took; written to DIR/summary.md and printed. The
GPU scripts (bench/gpu/judge20.sh, bench/gpu/judge_variants.sh) end with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import orjson


def table(root: Path) -> str:
    lines = ["| run | alpha | T | AUC | R@P0.99 | R@P0.95 | R@P0.90 | agree | s |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for sweep in sorted(root.glob("*/sweep.json")):
        for r in orjson.loads(sweep.read_bytes()):
            cells = [sweep.parent.name, r.get("alpha", ""), r.get("temperature", "")]
            cells += [f"{r[k]:.4f}" for k in ("auc", "recall_at_p0.99", "recall_at_p0.95",
                                               "recall_at_p0.9")]
            agree = r.get("agree")
            cells += ["" if agree is None else f"{agree:.3f}", r["seconds"]]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    if list(root.glob("mpnet-fold*/sweep.json")):
        lines.append("\nmpnet-fold*: scored on the half of train it did not train on, not on dev.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m tools.judge.summary DIR")
    root = Path(args[0])
    text = table(root)
    (root / "summary.md").write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
