"""The study's table from the raw files of bench/study_gpu.sh: per (config, workload) the
client's numbers (vllm bench serve JSON) over repeats and vLLM's own counters (/metrics read
before and after each run): speculative acceptance, preemptions, prefix-cache hits.

  python -m bench.study_table docs/gpu-results/study/results [--plot docs/img/gpu/study.png]
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from collections import defaultdict
from pathlib import Path

COUNTERS = ("spec_decode_num_drafts_total", "spec_decode_num_draft_tokens_total",
            "spec_decode_num_accepted_tokens_total", "num_preemptions_total",
            "prefix_cache_hits_total", "prefix_cache_queries_total")
PAIRS = {"ngram_edit": "base_edit", "draft_edit": "base_edit", "fp8_long": "base_long",
         "prefix_shared": "base_shared", "ngram_edit1c": "base_edit1c",
         **{f"{p}{spec}_{wl}": f"{p}base_{wl}" for p in ("w", "x", "s", "m")
            for spec in ("ngram", "ngram5", "ngpu") for wl in ("edit", "edit1c")}}


def _text(path: Path) -> str:
    """A /metrics dump as written, or gzipped beside it (path + .gz); "" if neither is there."""
    if path.exists():
        return path.read_text()
    packed = path.with_name(path.name + ".gz")
    return gzip.decompress(packed.read_bytes()).decode() if packed.exists() else ""


def counters(path: Path) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for line in _text(path).splitlines():
        m = re.match(r"vllm:(\w+)\{[^}]*\} ([0-9.e+]+)$", line)
        if m and m.group(1) in COUNTERS:
            out[m.group(1)] += float(m.group(2))
    return out


def collect(results: Path) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = defaultdict(list)
    for path in sorted(results.glob("*_[0-9].json")):
        tag = path.stem
        data = json.loads(path.read_text())
        a, b = counters(results / f"m_{tag}_a.txt"), counters(results / f"m_{tag}_b.txt")
        row = {k: float(data[k]) for k in ("mean_tpot_ms", "median_ttft_ms", "p99_ttft_ms",
                                            "output_throughput", "request_throughput")}
        row.update({k: b[k] - a[k] for k in COUNTERS})
        runs[tag.rsplit("_", 1)[0]].append(row)
    return runs


def _span(vals: list[float]) -> str:
    mean = sum(vals) / len(vals)
    return f"{mean:.2f} [{min(vals):.2f}–{max(vals):.2f}]" if len(vals) > 1 else f"{mean:.2f}"


def table(runs: dict[str, list[dict[str, float]]]) -> str:
    lines = ["| run (n) | TPOT ms | TTFT p50 ms | out tok/s | vs base: TPOT, tok/s | "
             "spec accept / mean len | preemptions | prefix hit |", "|" + "---|" * 8]
    for name, rows in sorted(runs.items()):
        def mean(k: str, rs: list[dict[str, float]] = rows) -> float:
            return sum(r[k] for r in rs) / len(rs)
        ratio = ""
        base = runs.get(PAIRS.get(name, ""))
        if base:
            ratio = (f"{mean('mean_tpot_ms') / mean('mean_tpot_ms', base):.2f}×, "
                     f"{mean('output_throughput') / mean('output_throughput', base):.2f}×")
        spec = ""
        if mean("spec_decode_num_draft_tokens_total") > 0:
            acc = mean("spec_decode_num_accepted_tokens_total")
            spec = (f"{acc / mean('spec_decode_num_draft_tokens_total'):.0%} / "
                    f"{1 + acc / mean('spec_decode_num_drafts_total'):.2f}")
        hit = ""
        if mean("prefix_cache_queries_total") > 0:
            hit = f"{mean('prefix_cache_hits_total') / mean('prefix_cache_queries_total'):.0%}"
        lines.append(f"| {name} ({len(rows)}) | {_span([r['mean_tpot_ms'] for r in rows])} | "
                     f"{_span([r['median_ttft_ms'] for r in rows])} | "
                     f"{_span([r['output_throughput'] for r in rows])} | {ratio} | {spec} | "
                     f"{mean('num_preemptions_total'):.0f} | {hit} |")
    return "\n".join(lines)


def plot(runs: dict[str, list[dict[str, float]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in PAIRS if n in runs]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for i, key in enumerate(("mean_tpot_ms", "output_throughput")):
        vals = [sum(r[key] for r in runs[n]) / len(runs[n]) /
                (sum(r[key] for r in runs[PAIRS[n]]) / len(runs[PAIRS[n]])) for n in names]
        ax.bar([j + 0.4 * i for j in range(len(names))], vals, 0.4,
               label="TPOT ratio (lower is better)" if i == 0 else "output tok/s ratio")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + 0.2 for j in range(len(names))], names)
    ax.set_ylabel("vs baseline")
    ax.legend()
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("results", type=Path)
    p.add_argument("--plot", type=Path, default=None)
    args = p.parse_args(argv)
    runs = collect(args.results)
    print(table(runs))
    if args.plot:
        plot(runs, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
