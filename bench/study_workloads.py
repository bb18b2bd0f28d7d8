"""Seeded workloads from held-out source files (deploy/corpus.py's split), one JSONL per
mechanism, in the format `vllm bench serve --dataset-name custom` replays: {"prompt",
"output_tokens"}. Sizes are in characters (code is ~3.5 characters a token here).

  code_edit      a file chunk, then its first lines again: the answer repeats the prompt
  code_continue  a file chunk to continue: little to copy (where n-gram should not help)
  shared_prefix  groups of requests sharing one long chunk, each with its own short tail
  long_context   long distinct chunks (many long sequences: a small KV cache binds)
  agent_repeat   a few tool-call templates repeated with small changes (recurring outputs)
  chat_mix       questions with exact repeats and reworded repeats (the proxy's cache)
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path

from deploy.train_model import COPY_MARKER

Row = dict[str, object]


def _chunks(files: list[Path], size: int, rng: random.Random, n: int) -> list[str]:
    texts = [t for t in (_read(f) for f in files) if len(t) >= size]
    if not texts:
        raise SystemExit(f"no held-out file has {size} characters")
    out = []
    for _ in range(n):
        text = rng.choice(texts)
        start = rng.randrange(0, len(text) - size + 1)
        out.append(text[start:start + size])
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""


def code_edit(files: list[Path], rng: random.Random, n: int) -> list[Row]:
    rows: list[Row] = []
    for chunk in _chunks(files, 2400, rng, n):
        head = "\n".join(chunk.splitlines()[:2])
        prompt = f"{chunk}{COPY_MARKER}{head}\n"
        rows.append({"prompt": prompt, "output_tokens": 256})
    return rows


def code_continue(files: list[Path], rng: random.Random, n: int) -> list[Row]:
    return [{"prompt": c, "output_tokens": 256} for c in _chunks(files, 2400, rng, n)]


def shared_prefix(files: list[Path], rng: random.Random, n: int,
                  groups: int | None = None) -> list[Row]:
    """`groups` prefixes (default n // 16: each shared by 16 requests), each request one of
    them in turn: with a fixed number the prefix cache's working set stays the same however many
    requests are written (a sweep at 50 req/s needs thousands)."""
    prefixes = _chunks(files, 12000, rng, groups or max(1, n // 16))
    tails = _chunks(files, 300, rng, n)
    return [{"prompt": f"{prefixes[i % len(prefixes)]}\n# next:\n{tails[i]}", "output_tokens": 64}
            for i in range(n)]


def long_context(files: list[Path], rng: random.Random, n: int) -> list[Row]:
    return [{"prompt": c, "output_tokens": 512} for c in _chunks(files, 10000, rng, n)]


def agent_repeat(files: list[Path], rng: random.Random, n: int) -> list[Row]:
    tools = _chunks(files, 1500, rng, 4)  # four "tool" sources, each asked about again and again
    rows: list[Row] = []
    for _ in range(n):
        tool = rng.choice(tools)
        name = rng.choice(["read", "patch", "test", "lint"])
        rows.append({"prompt": f"{tool}\n# agent step: {name}\n# output:\n{tool[:200]}",
                     "output_tokens": 128})
    return rows


_REWORD = [("What does", "Explain what"), ("do?", "does."), ("this code", "the code below")]


def chat_mix(files: list[Path], rng: random.Random, n: int) -> list[Row]:
    base = [f"What does this code do?\n{c}" for c in _chunks(files, 600, rng, max(1, n // 4))]
    rows: list[Row] = []
    for _ in range(n):
        q = rng.choice(base)
        if rng.random() < 0.3:
            for old, new in rng.sample(_REWORD, 2):
                q = q.replace(old, new)
        rows.append({"prompt": q, "output_tokens": 128})
    return rows


WORKLOADS: dict[str, Callable[[list[Path], random.Random, int], list[Row]]] = {
    "code_edit": code_edit, "code_continue": code_continue, "shared_prefix": shared_prefix,
    "long_context": long_context, "agent_repeat": agent_repeat, "chat_mix": chat_mix,
}


def write_all(held_out_list: Path, out_dir: Path, n: int, seed: int,
              only: list[str] | None = None, groups: int | None = None) -> list[Path]:
    files = [Path(line) for line in held_out_list.read_text().splitlines() if line]
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in WORKLOADS.items():
        if only and name not in only:
            continue
        rng = random.Random(f"{seed}:{name}")
        rows = (shared_prefix(files, rng, n, groups) if make is shared_prefix
                else make(files, rng, n))
        path = out_dir / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="write the study's workloads from held-out files")
    p.add_argument("held_out", type=Path, help="held_out_files.txt written by train-model")
    p.add_argument("out", type=Path)
    p.add_argument("-n", type=int, default=256, help="requests per workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default=None, metavar="NAME,...",
                   help=f"write only these ({', '.join(WORKLOADS)})")
    p.add_argument("--groups", type=int, default=None,
                   help="shared_prefix's number of prefixes (default: one per 16 requests)")
    args = p.parse_args(argv)
    only = args.only.split(",") if args.only else None
    if only and (bad := set(only) - set(WORKLOADS)):
        p.error(f"--only: unknown {sorted(bad)}")
    for path in write_all(args.held_out, args.out, args.n, args.seed, only, args.groups):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
