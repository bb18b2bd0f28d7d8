"""PNG plots for docs/benchmarks.md (matplotlib, Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadtest.plots import pyplot, save

COLORS = {"bare": "#999999", "ours": "#1f77b4", "litellm": "#d62728", "ours-2w": "#2ca02c"}


def _bars(ax: Any, groups: list[str], series: dict[str, list[float]], title: str,
          ylabel: str, log: bool = False) -> None:
    width = 0.8 / max(1, len(series))
    for k, (name, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(groups))]
        bars = ax.bar(xs, values, width, label=name, color=COLORS.get(name))
        for b, v in zip(bars, values, strict=True):
            if v == v:  # not NaN
                ax.annotate(f"{v:.1f}" if v < 100 else f"{v:.0f}",
                            (b.get_x() + b.get_width() / 2, b.get_height()),
                            ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel, fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)


def overhead_plots(doc: dict[str, Any], out: Path) -> list[str]:
    plt = pyplot()
    out.mkdir(parents=True, exist_ok=True)
    add = doc["added"]
    targets = [t for t in ("bare", "ours", "litellm") if t in add]
    paths = []
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    runs = [("json_c1", "e2el", "non-streaming, c=1"),
            ("stream_c1", "ttft", "streaming TTFT, c=1"),
            ("stream_c16", "ttft", "streaming TTFT, c=16")]
    groups = [f"{label}\np{p}" for _, _, label in runs for p in (50, 99)]
    series = {t: [add[t][r][f"{m}_p{p}_ms"] for r, m, _ in runs for p in (50, 99)]
              for t in targets}
    _bars(axes[0], groups[:2], {t: v[:2] for t, v in series.items()},
          "Added latency, non-streaming c=1", "ms added vs direct (log)", log=True)
    _bars(axes[1], groups[2:4], {t: v[2:4] for t, v in series.items()},
          "Added TTFT, streaming c=1", "ms added vs direct (log)", log=True)
    _bars(axes[2], groups[4:], {t: v[4:] for t, v in series.items()},
          "Added TTFT, streaming c=16", "ms added vs direct (log)", log=True)
    paths.append(save(fig, out / "overhead-latency.png", plt))

    fig, ax = plt.subplots(figsize=(7, 4))
    names = [t for t in ("bare", "ours", "ours-2w", "litellm") if t in add]
    rps = [add[t]["json_sat"]["rps"] for t in names]
    bars = ax.bar(names, rps, color=[COLORS.get(n) for n in names])
    for b, v in zip(bars, rps, strict=True):
        ax.annotate(f"{v:.0f}", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center",
                    va="bottom", fontsize=9)
    direct = doc["results"]["direct"]["json_sat"]["rps"]
    ax.set_title(f"Max sustained req/s, non-streaming, c=64 (mock direct: {direct:.0f})",
                 fontsize=10)
    ax.set_ylabel("req/s")
    ax.grid(axis="y", alpha=0.3)
    paths.append(save(fig, out / "overhead-throughput.png", plt))
    return paths


def cache_plots(doc: dict[str, Any], out: Path) -> list[str]:
    plt = pyplot()
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    px, em, ix = doc.get("proxy", {}), doc.get("embed", {}), doc.get("index", {})
    if px:
        fig, ax = plt.subplots(figsize=(7, 4))
        cs = [c for c in (1, 4, 16) if f"exact_hit_c{c}" in px]
        for tier, color in (("exact", "#1f77b4"), ("semantic", "#ff7f0e")):
            for p, style in ((50, "-o"), (99, "--o")):
                ax.plot(cs, [px[f"{tier}_hit_c{c}"][f"p{p}_ms"] for c in cs], style,
                        color=color, label=f"{tier} hit p{p}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(cs)
        ax.set_xticklabels([str(c) for c in cs])
        ax.set_xlabel("concurrency")
        ax.set_ylabel("ms at the client (log)")
        ax.set_title("Cache hit latency through the proxy", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        paths.append(save(fig, out / "cache-hits.png", plt))
    if em or ix:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4))
        if em:
            cs = [1, 8, 32]
            for label, color in (("on", "#1f77b4"), ("on_wait2ms", "#ff7f0e"),
                                 ("off", "#999999")):
                if f"batching_{label}_c1" not in em:
                    continue
                axes[0].plot(cs, [em[f"batching_{label}_c{c}"]["per_s"] for c in cs], "-o",
                             color=color, label=f"micro-batching {label.replace('_', ', ')}")
            axes[0].set_xscale("log", base=2)
            axes[0].set_xticks(cs)
            axes[0].set_xticklabels([str(c) for c in cs])
            axes[0].set_xlabel("concurrent callers")
            axes[0].set_ylabel("embeddings/s")
            axes[0].set_title("Embedder throughput (MiniLM-L6 on ONNX Runtime, 1 thread)",
                              fontsize=10)
            axes[0].legend(fontsize=8)
            axes[0].grid(alpha=0.3)
        if ix:
            sizes = sorted({int(k.split("_")[1]) for k in ix if k.startswith("flat_")})
            for kind, color in (("flat", "#999999"), ("hnsw", "#1f77b4")):
                got = [s for s in sizes if f"{kind}_{s}" in ix]
                axes[1].plot(got, [ix[f"{kind}_{s}"]["search_p50_ms"] for s in got], "-o",
                             color=color, label=f"{kind} p50")
                axes[1].plot(got, [ix[f"{kind}_{s}"]["search_p99_ms"] for s in got], "--o",
                             color=color, label=f"{kind} p99")
            axes[1].set_xscale("log")
            axes[1].set_yscale("log")
            axes[1].set_xlabel("entries in the partition")
            axes[1].set_ylabel("ms per search (log)")
            axes[1].set_title("Vector search: flat vs HNSW (dim 384, top 4)", fontsize=10)
            axes[1].legend(fontsize=8)
            axes[1].grid(alpha=0.3)
        paths.append(save(fig, out / "cache-embed-index.png", plt))
    return paths
