"""The sweep's PNG: throughput and latency against load (`loadtest.sweep`, `sweep_concurrency`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(points: list[dict[str, Any]], path: Path, knee: float | None,
          goodput: float | None, xlabel: str = "offered request rate (req/s)") -> Path:
    from loadtest.plots import pyplot, save

    plt = pyplot()
    pts = sorted(points, key=lambda p: p["offered_rate"])
    x = [p["offered_rate"] for p in pts]
    # a point without data (no arrival in its window) measured nothing: no point of any line,
    # a dotted mark instead; one without answers measured a throughput of 0 but no latency.
    # Until 2026-11-28 both were drawn as measured zeros.
    data = [p for p in pts if not p.get("no_data")]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([p["offered_rate"] for p in data], [p["achieved_rate"] for p in data], "o-",
             label="achieved")
    if xlabel.startswith("offered"):
        ax1.plot(x, x, "--", color="grey", label="offered")
    ax1.set_xlabel(xlabel)
    ax1.set_ylabel("completed req/s")
    ax1.set_title("Throughput")
    for key, label in (("p99_ttft_ms", "TTFT p99"), ("mean_ttft_ms", "TTFT mean"),
                       ("p99_tpot_ms", "TPOT p99")):
        xy = [(p["offered_rate"], p[key]) for p in data
              if p.get("completed") and p.get(key) is not None]
        if xy:
            ax2.plot([r for r, _ in xy], [v for _, v in xy], "o-", label=label)
    ax2.set_xlabel(xlabel)
    ax2.set_ylabel("ms")
    ax2.set_yscale("log")
    ax2.set_title("Latency")
    for ax in (ax1, ax2):
        for i, p in enumerate(p for p in pts if p.get("no_data")):
            ax.axvline(p["offered_rate"], color="grey", linestyle=":",
                       label="no data" if i == 0 else "_nolegend_")
        if knee is not None:
            ax.axvline(knee, color="red", alpha=0.4, label=f"knee {knee:g}")
        if goodput is not None:
            ax.axvline(goodput, color="green", alpha=0.4, label=f"goodput {goodput:g}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save(fig, path, plt)
    return path
