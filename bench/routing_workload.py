"""Shared-prefix datasets for routing experiments, in the ShareGPT format the load tester
replays (`python -m loadtest run --workload sharegpt --dataset-path FILE`; give no --tokenizer,
whose length filter drops prompts over 1024 tokens).

Every row is one tenant's long system prompt, then a question of its own. `--hot 0` spreads the
rows evenly over the tenants (the multi-tenant case); `--hot 0.8` gives tenant 0 that share of
all rows (the hot-spot case). The load tester sends the rows in a seeded random order, at the
Poisson rate it is given, so each arrival's tenant is drawn independently.

    python -m bench.routing_workload --tenants 100 --prefix-words 2000 --rows 4000 \\
        --out .bench/tenants.json
    python -m bench.routing_workload --tenants 100 --prefix-words 2000 --rows 4000 --hot 0.8 \\
        --out .bench/hotspot.json
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from loadtest.workload import WORDS  # ~1 token each in BPE vocabularies


def rows(tenants: int, prefix_words: int, question_words: int, n: int, hot: float,
         seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    prompts = [f"You are the assistant of tenant {t}. " +
               " ".join(rng.choice(WORDS) for _ in range(prefix_words)) for t in range(tenants)]
    out = []
    for i in range(n):
        t = 0 if rng.random() < hot else rng.randrange(tenants)
        question = f"Question {i}: " + " ".join(rng.choices(WORDS, k=question_words)) + "?"
        out.append({"id": f"t{t}-{i}", "user": f"tenant-{t}", "conversations": [
            {"from": "human", "value": prompts[t] + "\n\n" + question},
            {"from": "gpt", "value": " ".join(rng.choices(WORDS, k=64))}]})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing_workload", description=__doc__)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--prefix-words", type=int, default=2000)
    p.add_argument("--question-words", type=int, default=32)
    p.add_argument("--rows", type=int, default=4000)
    p.add_argument("--hot", type=float, default=0.0, help="share of rows for tenant 0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if not (a.tenants >= 1 and 0.0 <= a.hot <= 1.0 and a.rows >= 1):
        p.error("need --tenants >= 1, --rows >= 1 and 0 <= --hot <= 1")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(rows(a.tenants, a.prefix_words, a.question_words, a.rows, a.hot,
                                     a.seed)))
    print(f"{a.rows} rows, {a.tenants} tenants, hot share {a.hot} -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
