"""python -m tools.judge.portable [MODEL_DIR] [--pairs N] [--table] [--write-reference]

Does a judge score on this CPU what it scored when it was calibrated? Prints the CPU's integer
instruction sets and which weights the proxy serves with here, then on N seeded dev pairs the
logits of the weights as stored (signed int8) beside the portable path (judge_session.py:
unsigned, exact on every x86 CPU; the proxy serves the stored weights only where they are
exact too): their correlation and largest difference, and each path's cost per pair.
--table recomputes the whole calibration table on dev through the served path (cosine floor,
rules, judge), with each kind of weights, counts the rows whose hits or false hits differ from
judge.json's and prints the thresholds each picks.
--levels also scores the pairs with ONNX Runtime's basic graph optimisation instead of all of
it: the same integer products, other float kernels around them (how far such differences move
a logit, as other CPUs' float kernels may).
--write-reference stores 32 of the N pairs, spread over the logits' range, with their portable
logits in judge.json: the judge re-scores them at every start and accepts nothing when the
median pair moves (judge.py).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import orjson

from proxy.cache.calibrate import pick, table
from proxy.cache.judge import MODEL_DIR, Judge
from proxy.cache.judge_session import open_session, served_weights
from tools.judge.train import THRESHOLDS, cosines, gated, load, reference


def cpu_flags() -> str:
    try:
        words = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return "unknown"
    keep = ("avx2", "avx512f", "avx512_vnni", "avx512vnni", "avx_vnni", "amx_int8")
    return " ".join(sorted({w for w in words if w in keep})) or "none of " + ",".join(keep)


def timed(judge: Judge, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    out = np.array(judge.logits(pairs))
    return out, (time.perf_counter() - started) / max(1, len(pairs)) * 1000


def spread(a: np.ndarray, b: np.ndarray) -> str:
    """How far two scorings of the same pairs are apart, over the pairs both score."""
    ok = np.isfinite(a) & np.isfinite(b)
    gap = np.quantile(np.abs(a[ok] - b[ok]), [0.5, 0.9, 0.99, 1.0])
    return f"|diff| median {gap[0]:.4f} p90 {gap[1]:.4f} p99 {gap[2]:.4f} max {gap[3]:.4f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.judge.portable")
    parser.add_argument("model", nargs="?", type=Path, default=MODEL_DIR)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--table", action="store_true")
    parser.add_argument("--write-reference", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--levels", action="store_true")
    args = parser.parse_args(argv)
    print(f"cpu: {cpu_flags()}")
    dev = load(Path("tests/data/judge/dev.jsonl"))
    rng = np.random.default_rng(0)
    sample = [dev[int(i)] for i in rng.choice(len(dev), min(args.pairs, len(dev)),
                                              replace=False)]
    pairs = [(p["a"], p["b"]) for p in sample]
    judge = Judge.open(0.01, args.model, threads=args.threads, check=False, weights="unsigned")
    print(f"the judge serves the {served_weights()} weights on this CPU (judge_session.py)")
    meta = orjson.loads((args.model / "judge.json").read_bytes())
    stored = Judge(open_session(args.model / meta["model"], args.threads, "stored"),
                   judge.tokenizer, judge.rows, 0.01, judge.max_tokens, judge.floor)
    ours, ours_ms = timed(judge, pairs)
    theirs, theirs_ms = timed(stored, pairs)
    ok = np.isfinite(ours) & np.isfinite(theirs)
    corr = float(np.corrcoef(ours[ok], theirs[ok])[0, 1])
    print(f"{args.model}: {ok.sum()} dev pairs, stored vs portable weights: "
          f"correlation {corr:.4f}, {spread(ours, theirs)}; "
          f"ms per pair stored {theirs_ms:.1f}, portable {ours_ms:.1f}")
    if args.levels:
        basic = Judge(open_session(args.model / meta["model"], args.threads, "unsigned",
                                   level="ORT_ENABLE_BASIC"),
                      judge.tokenizer, judge.rows, 0.01, judge.max_tokens, judge.floor)
        other, _ = timed(basic, pairs)
        basic.close()
        print(f"portable weights, basic vs all graph optimisations: {spread(ours, other)}")
    if args.table:
        cos = cosines(dev)
        live = [i for i, p in enumerate(dev) if cos[i] >= judge.floor]
        committed = {r[0]: (r[1], r[2]) for r in meta["table"]}
        for name, path in (("portable", judge), ("stored", stored)):
            logits = np.full(len(dev), -np.inf)
            logits[live] = path.logits([(dev[i]["a"], dev[i]["b"]) for i in live])
            scores = gated(list(logits), cos, dev, judge.floor)
            rows = table(scores, [bool(p["same"]) for p in dev], THRESHOLDS,
                         families=[p["family"] for p in dev])
            gaps = [max(abs(r.hits - committed[r.threshold][0]),
                        abs(r.false_hits - committed[r.threshold][1])) for r in rows]
            picked = ", ".join(f"{rate:g}: {pick(rows, rate)} (judge.json "
                               f"{pick(judge.rows, rate)})" for rate in (0.05, 0.1, 0.25))
            print(f"table, {name} weights: {sum(g > 0 for g in gaps)} of {len(rows)} rows "
                  f"differ from judge.json, by at most {max(gaps)} pairs; thresholds {picked}")
    stored.close()
    if args.write_reference:
        meta["reference"] = reference(sample, [float(x) for x in ours])
        (args.model / "judge.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
        print(f"wrote {len(meta['reference'])} reference pairs to {args.model / 'judge.json'}")
    judge.close()


if __name__ == "__main__":
    main()
