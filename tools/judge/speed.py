"""python -m tools.judge.speed [mpnet|minilm|DIR] [--variants unsigned,stored] [--rounds N]
                              [--check N] [--profile N] [--json PATH]

What a judge costs per candidate on this CPU, and whether a faster way to run it scores the
same. Variants are ways to open the same model (`WEIGHTS[:THREADS]`, weights as in
judge_session.open_session: unsigned, stored, auto), each a Judge scoring one pair at a time
as the proxy does (tokenizer included). On a shared box absolute times move with the load, so
the variants are timed interleaved: each round draws one dev pair and scores it with every
variant in a shuffled order; the p50s and each variant's p50 against the first's come with
95 % bootstrap intervals over the rounds (resampled together, so the ratio is paired).

--check N first scores N seeded dev pairs (all: every dev pair; 0: none) with every variant
and prints how far each is from the first (max |diff|, pairs identical to the bit): a faster
variant that moves a logit changes verdicts. --profile N runs ONNX Runtime's profiler over N
pairs of the served weights (auto; the first variant's thread count) and splits a pair's time
into tokenizing, the session's run and its kernels by op type. Dev only
(tests/data/judge/dev.jsonl), never test.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

from proxy.cache.config import model_dir
from proxy.cache.judge import Judge
from proxy.cache.judge_session import served_weights
from tools.judge.portable import cpu_flags

DEV = Path("tests/data/judge/dev.jsonl")


def dev_pairs() -> list[tuple[str, str]]:
    rows = [json.loads(x) for x in DEV.read_text().splitlines() if x.strip()]
    return [(r["a"], r["b"]) for r in rows]


def root_of(name: str) -> Path:
    return Path(name) if "/" in name else model_dir(name)


def opened(root: Path, spec: str) -> Judge:
    weights, _, threads = spec.partition(":")
    return Judge.open(0.05, root, threads=int(threads or 1), check=False,
                      weights=weights)  # type: ignore[arg-type]


def boot(lat: np.ndarray, stat: Any, n: int = 2000) -> tuple[float, float]:
    rng = np.random.default_rng(3)
    size = lat.shape[1]
    got = [stat(lat[:, rng.integers(0, size, size)]) for _ in range(n)]
    lo, hi = np.percentile(got, [2.5, 97.5])
    return float(lo), float(hi)


def check(judges: list[Judge], specs: list[str], pairs: list[tuple[str, str]],
          n: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    idx = range(len(pairs)) if n == 0 else rng.choice(len(pairs), min(n, len(pairs)),
                                                      replace=False)
    sample = [pairs[int(i)] for i in idx]
    logits = [np.array(j.logits(sample)) for j in judges]
    out = {}
    for spec, got in zip(specs, logits, strict=True):
        ok = np.isfinite(logits[0]) & np.isfinite(got)
        same_inf = bool((np.isinf(logits[0]) == np.isinf(got)).all())
        diff = float(np.abs(got[ok] - logits[0][ok]).max()) if ok.any() else 0.0
        out[spec] = {"pairs": len(sample), "scored": int(ok.sum()), "max_abs_diff": diff,
                     "identical": int((got[ok] == logits[0][ok]).sum()),
                     "same_over_window": same_inf}
        print(f"  {spec:12} vs {specs[0]}: {len(sample)} dev pairs ({ok.sum()} in the window), "
              f"max |diff| {diff:.3g}, identical {out[spec]['identical']}", flush=True)
    return out


def timed(judges: list[Judge], specs: list[str], pairs: list[tuple[str, str]],
          rounds: int) -> dict[str, Any]:
    rng = random.Random(2)
    lat = np.zeros((len(judges), rounds))
    order = list(range(len(judges)))
    for r in range(rounds):
        pair = pairs[rng.randrange(len(pairs))]
        rng.shuffle(order)
        for k in order:
            started = time.perf_counter()
            judges[k].logits([pair])
            lat[k, r] = (time.perf_counter() - started) * 1000
    out = {}
    for k, spec in enumerate(specs):
        p50 = float(np.median(lat[k]))
        lo, hi = boot(lat, lambda x, k=k: np.median(x[k]))
        rlo, rhi = boot(lat, lambda x, k=k: np.median(x[k]) / np.median(x[0]))
        out[spec] = {"p50_ms": p50, "p50_ci": [lo, hi], "p99_ms": float(np.percentile(lat[k], 99)),
                     "p50_vs_first": p50 / float(np.median(lat[0])), "p50_vs_first_ci": [rlo, rhi]}
        print(f"  {spec:12} p50 {p50:6.2f} ms [{lo:.2f}, {hi:.2f}]  p99 {out[spec]['p99_ms']:6.2f}"
              f"  p50 / {specs[0]}'s {out[spec]['p50_vs_first']:.3f} [{rlo:.3f}, {rhi:.3f}]",
              flush=True)
    return out


def profile(root: Path, threads: int, pairs: list[tuple[str, str]], n: int) -> dict[str, Any]:
    import onnxruntime as ort

    from proxy.cache.judge_session import portable_bytes

    judge = Judge.open(0.05, root, threads=threads, check=False)
    sample = pairs[:n]
    started = time.perf_counter()
    encoded = [judge.tokenizer.encode_batch([p])[0] for p in sample]
    tokenize = (time.perf_counter() - started) / n * 1000
    encoded = [e for e in encoded if len(e.ids) <= judge.max_tokens]
    options = ort.SessionOptions()  # open_session's, with the profiler on
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.enable_profiling = True
    options.profile_file_prefix = f"/tmp/judge-speed-{os.getpid()}"
    path = root / "judge.onnx"
    model = portable_bytes(path) if judge.weights == "unsigned" else None
    session = ort.InferenceSession(model if model is not None else str(path), options,
                                   providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    started = time.perf_counter()
    for e in encoded:
        feed = {"input_ids": np.asarray([e.ids], dtype=np.int64),
                "attention_mask": np.ones((1, len(e.ids)), dtype=np.int64),
                "token_type_ids": np.asarray([e.type_ids], dtype=np.int64)}
        session.run(None, {k: v for k, v in feed.items() if k in names})
    run = (time.perf_counter() - started) / len(encoded) * 1000
    trace = Path(session.end_profiling())
    events = json.loads(trace.read_text())
    trace.unlink()
    by: collections.Counter[str] = collections.Counter()
    for ev in events:
        if ev.get("cat") == "Node" and ev["name"].endswith("_kernel_time"):
            by[ev["args"]["op_name"]] += ev["dur"]
    kernels = sum(by.values())
    tokens = float(np.mean([len(e.ids) for e in encoded]))
    print(f"  profile ({judge.weights} weights, {threads} thread(s), {len(encoded)} dev pairs, "
          f"{tokens:.1f} tokens a pair): tokenize {tokenize:.3f} ms, session.run {run:.2f} ms, "
          f"of which kernels {kernels / len(encoded) / 1000:.2f} ms:")
    ops = {}
    for op, us in by.most_common():
        ops[op] = us / len(encoded) / 1000
        if us / kernels >= 0.005:
            print(f"    {op:28} {ops[op]:7.3f} ms  {us / kernels * 100:5.1f} %")
    judge.close()
    return {"weights": judge.weights, "threads": threads, "pairs": len(encoded),
            "mean_tokens": tokens, "tokenize_ms": tokenize, "run_ms": run,
            "kernels_ms": kernels / len(encoded) / 1000, "ops_ms": ops}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.judge.speed")
    parser.add_argument("model", nargs="?", default="mpnet")
    parser.add_argument("--variants", default="unsigned,stored")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--check", default="200")
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    root = root_of(args.model)
    specs = args.variants.split(",")
    pairs = dev_pairs()
    doc: dict[str, Any] = {"model": str(args.model), "cpu": cpu_flags(),
                           "served_weights": served_weights(), "variants": specs,
                           "loadavg_before": os.getloadavg()}
    print(f"{args.model}: cpu {doc['cpu']}; the proxy serves the {doc['served_weights']} "
          f"weights here; load average {doc['loadavg_before']}", flush=True)
    judges = [opened(root, s) for s in specs]
    for j in judges:
        j.logits(pairs[:8])  # warm up
    if args.check != "0":
        doc["check"] = check(judges, specs, pairs, 0 if args.check == "all" else int(args.check))
    if args.rounds:
        doc["timing"] = timed(judges, specs, pairs, args.rounds)
    for j in judges:
        j.close()
    if args.profile:
        threads = int(specs[0].partition(":")[2] or 1)
        doc["profile"] = profile(root, threads, pairs, args.profile)
    doc["loadavg_after"] = os.getloadavg()
    print(f"load average after {doc['loadavg_after']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
