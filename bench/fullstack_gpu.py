"""Issue 14's full stack on a GPU: vLLM alone vs the proxy with its exact answer cache in front of
the same vLLM, on the load tester's `repeat` workload (the reference shape: 384 ± 33 % tokens in
and out, at most 250 in flight; a share of the requests are exact repeats of earlier ones, Zipf
popularity), each swept from light load to saturation with `loadtest sweep --slo`: the goodput
(the highest rate that meets the SLO) of each target, and their ratio.

Two GPUs, one vLLM on each (the same profile). For each repeat ratio the two sweeps run at once,
one per GPU; the next ratio swaps the GPUs. One proxy worker: the answer cache lives in the
worker's process (no Redis on the GPU host), and with several workers each would hold only its
own share of the entries.

    python -m bench.fullstack_gpu --model /root/model --results /root/fullstack --ratios 0.3,0.6
    python -m bench.fullstack_gpu --results DIR --report     # the table again
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.gpu_remeasure import proxy, vllm
from bench.procs import PY, REPO

TARGETS = ("direct", "fullstack")


def sweep(a: argparse.Namespace, ratio: float, target: str, url: str, backend: str,
          gpu: int, seed: int) -> None:
    out = a.results / f"r{ratio:g}-{target}"
    cmd = [PY, "-m", "loadtest", "sweep", "--target", url, "--model", a.served_name,
           "--tokenizer", a.model, "--workload", "repeat", "--repeat-ratio", f"{ratio:g}",
           "--zipf", "1.0", "--input-len", "384", "--output-len", "384", "--range-ratio", "0.33",
           "--ignore-eos", "--max-concurrency", "250", "--start-rate", f"{a.start_rate:g}",
           "--factor", "1.5", "--max-rate", "400", "--point-duration", f"{a.point_s:g}",
           "--warmup-seconds", f"{a.warm_s:g}", "--slo", a.slo, "--bisect-steps",
           str(a.bisect_steps), "--workers", "auto", "--backend-url", backend, "--no-progress",
           "--label", f"{target} r{ratio:g} gpu{gpu}", "--seed", str(seed), "--out", str(out)]
    with open(a.results / f"r{ratio:g}-{target}.log", "w") as log:
        subprocess.run(cmd, cwd=REPO, check=False, stdout=log, stderr=subprocess.STDOUT)


def point_cache(folder: Path, rate: float | None) -> dict[str, Any]:
    """The answer cache's numbers at the point swept at `rate` (the goodput point)."""
    for f in sorted(folder.glob("point-*.json")):
        res = json.loads(f.read_text())
        if rate is not None and abs(float(res.get("request_rate") or 0) - rate) < 1e-9:
            return dict(res.get("cache") or {})
    return {}


def report(a: argparse.Namespace) -> str:
    lines = [f"SLO {a.slo}; goodput = the highest offered rate (req/s) whose "
             f"{a.point_s:g} s window met it (≥: no rate tried missed the SLO, a lower bound); "
             "ratio = full stack / vLLM alone", "",
             "| repeat ratio | target | goodput req/s | knee req/s | saturated at | "
             "hit rate at goodput | wrong cached answers |", "|---|---|---|---|---|---|---|"]
    summary: dict[str, Any] = {}
    for folder in sorted(a.results.glob("r*-direct")):
        ratio = folder.name[1:].split("-")[0]
        row: dict[str, Any] = {}
        for target in TARGETS:
            path = a.results / f"r{ratio}-{target}" / "sweep.json"
            if not path.exists():
                continue
            s = json.loads(path.read_text())
            cache = point_cache(path.parent, s.get("goodput_rate"))
            # bounded: some rate tried missed the SLO (sweeps before the flag: from the points)
            bounded = s.get("goodput_bounded",
                            any(not p["meets_slo"] for p in s.get("points", [])))
            row[target] = {**{k: s.get(k) for k in ("goodput_rate", "knee_rate",
                                                    "saturation_rate")},
                           "goodput_bounded": bounded, "cache": cache}
            hit = f"{cache['hit_share']:.2f}" if "hit_share" in cache else "–"
            wrong = cache.get("wrong_cached_answers", "–")
            good = f"{'' if bounded else '≥ '}{s.get('goodput_rate')}"
            lines.append(f"| {ratio} | {target} | {good} | {s.get('knee_rate')} | "
                         f"{s.get('saturation_rate')} | {hit} | {wrong} |")
        g = [row.get(t, {}).get("goodput_rate") for t in TARGETS]
        if all(g):
            exact = [row[t]["goodput_bounded"] for t in TARGETS]
            mark = {(True, True): "", (True, False): "≥ ", (False, True): "≤ "}.get(
                (exact[0], exact[1]), "? ")  # a lower bound above or below the line
            row["goodput_ratio"] = g[1] / g[0]
            row["goodput_ratio_is"] = {"": "exact", "≥ ": "a lower bound",
                                       "≤ ": "an upper bound", "? ": "unknown"}[mark]
            lines.append(f"| {ratio} | **ratio** | **{mark}{g[1] / g[0]:.2f}×** | | | | |")
        summary[ratio] = row
    (a.results / "summary.json").write_text(json.dumps(summary, indent=1))
    text = "\n".join(lines) + "\n"
    (a.results / "summary.md").write_text(text)
    return text


def plot(a: argparse.Namespace, path: Path) -> Path:
    """TTFT p99 against the achieved rate, every sweep point, one line per (ratio, target)."""
    from bench.plots import _plt

    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for folder in sorted(a.results.glob("r*-*/")):
        s = json.loads((folder / "sweep.json").read_text()) if (folder / "sweep.json").exists() \
            else None
        if not s:
            continue
        pts = sorted(s["points"], key=lambda p: p["achieved_rate"] or 0)
        ratio, target = folder.name[1:].split("-", 1)
        ax.plot([p["achieved_rate"] for p in pts], [p["p99_ttft_ms"] for p in pts],
                marker="o", linestyle="-" if target == "fullstack" else "--",
                label=f"{'proxy + exact cache' if target == 'fullstack' else 'vLLM alone'}, "
                      f"{float(ratio):.0%} repeats")
    slo = dict(item.split(":") for item in a.slo.split(","))
    if "ttft_p99" in slo:
        ax.axhline(float(slo["ttft_p99"]), color="grey", linewidth=0.8)
        ax.annotate("SLO", (1, float(slo["ttft_p99"])), fontsize=7, color="grey")
    ax.set_yscale("log")
    ax.set_xlabel("achieved request rate (req/s)", fontsize=8)
    ax.set_ylabel("TTFT p99 (ms)", fontsize=8)
    ax.set_title("Full stack vs vLLM alone, repeat workload, 2x H200 (random 3B)", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fullstack_gpu", description=__doc__)
    p.add_argument("--model", default="/root/model")
    p.add_argument("--served-name", default="model")
    p.add_argument("--profile", default="baseline", help="both vLLMs' deploy profile")
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--ratios", default="0.3,0.6",
                   help="shares of exact repeats, one sweep pair each")
    p.add_argument("--slo", default="ttft_p99:1000,tpot_p99:50")
    p.add_argument("--start-rate", type=float, default=8.0)
    p.add_argument("--point-s", type=float, default=30.0, help="measured window per point")
    p.add_argument("--warm-s", type=float, default=5.0, help="ramp-up before each window")
    p.add_argument("--bisect-steps", type=int, default=2)
    p.add_argument("--report", action="store_true")
    p.add_argument("--plot", type=Path, default=None, help="also write this PNG")
    a = p.parse_args(argv)
    a.results.mkdir(parents=True, exist_ok=True)
    if not a.report:
        t0 = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            backends = [f.result() for f in [pool.submit(vllm, a, g) for g in range(2)]]
        print(f"vLLMs up after {time.monotonic() - t0:.0f} s", flush=True)
        proxies = [proxy(a, v.url, 8300 + g, 1, "exact") for g, v in enumerate(backends)]
        try:
            for k, ratio in enumerate(float(r) for r in a.ratios.split(",")):
                t0 = time.monotonic()
                urls = [{"direct": v.url, "fullstack": px.url}
                        for v, px in zip(backends, proxies, strict=True)]
                order = TARGETS if k % 2 == 0 else TARGETS[::-1]  # target on GPU 0, GPU 1
                # both targets get the same prompts (seed); each ratio its own (100 k)
                with ThreadPoolExecutor(2) as pool:
                    for f in [pool.submit(sweep, a, ratio, t, urls[g][t], backends[g].url, g,
                                          100 * k)
                              for g, t in enumerate(order)]:
                        f.result()
                print(f"ratio {ratio:g}: {order[0]} on GPU 0, {order[1]} on GPU 1 in "
                      f"{time.monotonic() - t0:.0f} s", flush=True)
        finally:
            for px in proxies:
                px.stop()
            for v in backends:
                v.stop()
    sys.stdout.write(report(a))
    if a.plot:
        print(f"wrote {plot(a, a.plot)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
