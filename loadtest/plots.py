"""PNG plots for `compare` (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from loadtest.stats import p_word


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars(ax: Any, names: list[str], series: dict[str, list[float]], title: str,
         ylabel: str) -> None:
    x = np.arange(len(names))
    width = 0.8 / max(1, len(series))
    for i, (label, vals) in enumerate(series.items()):
        b = ax.bar(x + (i - (len(series) - 1) / 2) * width, vals, width, label=label)
        ax.bar_label(b, fmt="%.1f", fontsize=7, padding=1)
    ax.set_xticks(x, names, rotation=15 if len(names) > 3 else 0)
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    top = max((v for vals in series.values() for v in vals), default=0.0)
    ax.set_ylim(0, top * 1.25 if top > 0 else 1)
    if len(series) > 1:
        ax.legend(fontsize=8, ncols=len(series), loc="upper center")


def write_all(entries: list[tuple[str, dict[str, Any]]], out: Path,
              percentiles: list[float]) -> list[str]:
    plt = pyplot()
    names = [n for n, _ in entries]
    res = [r for _, r in entries]
    paths = []

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    bars(axes[0], names, {"req/s": [r.get("request_throughput", 0) for r in res]},
         "Request throughput", "requests / s")
    bars(axes[1], names, {"output": [r.get("output_throughput", 0) for r in res],
                          "total": [r.get("total_token_throughput", 0) for r in res]},
         "Token throughput", "tokens / s")
    paths.append(save(fig, out / "throughput.png", plt))

    stats = ["mean", "median"] + [f"p{p_word(p)}" for p in percentiles if p != 50]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, m, title in ((axes[0], "ttft", "Time to first token"),
                         (axes[1], "tpot", "Time per output token")):
        bars(ax, names, {s: [r.get(f"{s}_{m}_ms") or 0 for r in res] for s in stats},
             title, "ms")
    paths.append(save(fig, out / "latency.png", plt))

    if any((r.get("cache") or {}).get("hits") for r in res):
        fig, ax = plt.subplots(figsize=(6, 4))
        bars(ax, names, {"hit rate %": [100 * (r.get("cache") or {}).get("hit_rate", 0)
                                        for r in res]}, "Cache hit rate (X-Cache)", "%")
        for i, r in enumerate(res):
            wrong = (r.get("cache") or {}).get("wrong_cached_answers")
            if wrong:
                ax.annotate(f"{wrong} wrong", (i, 2), ha="center", color="red", fontsize=8)
        paths.append(save(fig, out / "cache.png", plt))
    return paths


def save(fig: Any, path: Path, plt: Any) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)
