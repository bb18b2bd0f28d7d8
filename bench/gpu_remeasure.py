"""Issue 13's GPU re-measure: vLLM direct vs the proxy (cache off, 1 and 4 workers) vs the proxy
with the answer cache on and a workload that never repeats (every lookup a miss: what the cache
costs when it never helps), with the multi-process client, steady-state windows and repeats.

With `--gpus 1` there is one vLLM and the chosen targets run one after another, their order
rotated every repeat. On a 2-GPU host the device budget fits it only as pairs: one vLLM per GPU,
each with its own proxies in front (`direct`, `proxy-1w`, `proxy-4w`, `proxy-cache-miss`), and
two targets measured at once, one per GPU, in an order that puts every target on both GPUs
across the repeats (the GPUs are the same model; any difference between them is spread, not
confounded).
Each run: Poisson arrivals at `--rate` for `--warm-s` + `--window-s` (+ drain), chat, random
prompts of 384 ± 33 % tokens in and out (`--ignore-eos`), at most 250 in flight; `--workers
auto` client processes. Only requests *sent* inside the window count (the ramp-up before it and
the drain after it are reported apart); vLLM's own histograms (the referee) are read around
every run by the load tester (`--backend-url`).

    python -m bench.gpu_remeasure --model /root/model --results /root/remeasure
    python -m bench.gpu_remeasure --results DIR --report     # the summary again
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.procs import PY, REPO, Proc
from loadtest import ci

TARGETS = ("direct", "proxy-1w", "proxy-4w", "proxy-cache-miss")
# (target on GPU 0, target on GPU 1) per slot; each target lands on both GPUs over 3 repeats
SLOTS = [[(0, 1), (2, 3)], [(1, 0), (3, 2)], [(2, 0), (3, 1)]]
METRICS = ("mean_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
           "mean_itl_ms", "mean_e2el_ms", "request_throughput", "output_throughput")


def slots(chosen: list[int], repeat: int) -> list[tuple[int, int]]:
    """The (GPU 0, GPU 1) target pairs of one repeat: the fixed rotation for all four targets;
    for two, one pair whose GPUs swap every repeat."""
    if len(chosen) == len(TARGETS):
        return SLOTS[repeat % len(SLOTS)]
    if len(chosen) != 2:
        raise SystemExit("--targets: all four, or two")
    return [(chosen[0], chosen[1]) if repeat % 2 == 0 else (chosen[1], chosen[0])]


def vllm(a: argparse.Namespace, gpu: int, sets: list[str] | None = None) -> Proc:
    port = 8101 + gpu
    extra = [arg for kv in sets or [] for arg in ("--set", kv)]
    return Proc(f"vllm-gpu{gpu}", [PY, "-m", "deploy", "backend", "--profile", a.profile,
                                   "--model", a.model, "--port", str(port), "--host",
                                   "127.0.0.1", *extra],
                f"http://127.0.0.1:{port}", env={"CUDA_VISIBLE_DEVICES": str(gpu)},
                ready_path="/health", timeout=1200)


def proxy(a: argparse.Namespace, upstream: str, port: int, workers: int, cache: str,
          redis_url: str | None = None, prefix: str = "vsp") -> Proc:
    shared = {"PROXY_REDIS_URL": redis_url, "PROXY_CACHE_REDIS_PREFIX": prefix} if redis_url else {}
    env = {**shared, "PROXY_UPSTREAM": upstream, "PROXY_PORT": str(port), "PROXY_CACHE": cache,
           "PROXY_WORKERS": str(workers), "PROXY_TOKENIZER": a.model,
           # no input cap of its own: the model's context, as vLLM alone has (a cap of 3,500 on a
           # 4,096-token model refused through the proxy what vLLM alone answered)
           "PROXY_MAX_OUTPUT_TOKENS": "1024",
           "PROXY_MAX_INFLIGHT": "4096", "PROXY_MAX_WAITING": "4096",
           "PROXY_LOG_LEVEL": "warning"}
    return Proc(f"proxy-{port}", [PY, "-m", "proxy", "serve"], f"http://127.0.0.1:{port}",
                env=env, timeout=300)


def run_one(a: argparse.Namespace, target: str, url: str, backend: str, repeat: int,
            gpu: int) -> Path:
    out: Path = a.results / f"{target}-{repeat}.json"
    cmd = [PY, "-m", "loadtest", "run", "--target", url, "--model", a.served_name, "--workload",
           "random", "--input-len", str(a.input_len), "--output-len", str(a.output_len),
           "--range-ratio", "0.33",
           "--ignore-eos", "--request-rate", str(a.rate), "--max-concurrency", "250",
           "--duration", str(a.warm_s + a.window_s), "--warmup", "8", "--workers", "auto", "--seed",
           str(100 + repeat), "--backend-url", backend, "--no-progress", "--label",
           f"{target} gpu{gpu}", "--json", str(out)]
    with open(a.results / f"{target}-{repeat}.log", "w") as log:
        subprocess.run(cmd, cwd=REPO, check=True, stdout=log, stderr=subprocess.STDOUT)
    return out


def window(a: argparse.Namespace, path: Path) -> dict[str, Any]:
    """Stats of the requests sent inside [warm_s, warm_s + window_s), from the per-request file;
    the ramp-up and the drain apart."""
    plain = path.with_suffix(".requests.jsonl")
    packed = plain.with_suffix(".jsonl.gz")  # as committed: texts stripped, gzipped
    text = plain.read_text() if plain.exists() else gzip.decompress(packed.read_bytes()).decode()
    rows = [json.loads(x) for x in text.splitlines()]
    inside = [r for r in rows if a.warm_s <= r["start"] < a.warm_s + a.window_s]
    ok = [r for r in inside if r["success"]]
    ttft = sorted(r["ttft"] * 1000 for r in ok)
    tpot = sorted((r["latency"] - r["ttft"]) / (r["output_tokens"] - 1) * 1000
                  for r in ok if r["output_tokens"] > 1)
    itl = [x * 1000 for r in ok for x in r["itl"]]

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] if xs else math.nan

    return {"requests": len(inside), "failed": len(inside) - len(ok),
            "ramp_requests": sum(r["start"] < a.warm_s for r in rows),
            "drain_requests": sum(r["start"] >= a.warm_s + a.window_s for r in rows),
            "mean_ttft_ms": statistics.fmean(ttft) if ttft else math.nan,
            "p50_ttft_ms": pct(ttft, 50), "p99_ttft_ms": pct(ttft, 99),
            "mean_tpot_ms": statistics.fmean(tpot) if tpot else math.nan,
            "p99_tpot_ms": pct(tpot, 99),
            "mean_itl_ms": statistics.fmean(itl) if itl else math.nan,
            "mean_e2el_ms": statistics.fmean(r["latency"] * 1000 for r in ok) if ok else math.nan,
            "request_throughput": len(ok) / a.window_s,
            "output_throughput": sum(r["output_tokens"] for r in ok) / a.window_s}


def report(a: argparse.Namespace) -> str:
    per: dict[str, list[dict[str, Any]]] = {}
    referee: dict[str, list[dict[str, Any]]] = {}
    for f in sorted(a.results.glob("*-[0-9].json")):
        target = f.stem.rsplit("-", 1)[0]
        per.setdefault(target, []).append(window(a, f))
        res = json.loads(f.read_text())
        referee.setdefault(target, []).append({
            "server": (res.get("server_metrics") or {}).get("backend", {}),
            "warnings": res["selfcheck"]["warnings"], "workers": res.get("client_workers")})
    base = per.get("direct")
    lines = [f"Steady window {a.window_s:g} s after {a.warm_s:g} s of ramp-up, rate {a.rate:g} "
             "req/s; mean ± 95 % t half-width over repeats; ratio vs direct; n.s. = not "
             "significant by Welch's t-test at 5 %", "",
             "| target | n | " + " | ".join(METRICS) + " |",
             "|---|---|" + "---|" * len(METRICS)]
    summary: dict[str, Any] = {}
    for target in TARGETS:
        runs = per.get(target)
        if not runs:
            continue
        cells = []
        summary[target] = {}
        for m in METRICS:
            iv = ci.interval([r[m] for r in runs])
            summary[target][m] = iv
            cell = f"{iv['mean']:.1f} ± {iv['half']:.1f}"
            if base and target != "direct":
                biv = ci.interval([r[m] for r in base])
                ratio = iv["mean"] / biv["mean"]
                cell += f" ({ratio:.3f}×{'' if ci.significant(iv, biv) else ' n.s.'})"
            cells.append(cell)
        lines.append(f"| {target} | {len(runs)} | " + " | ".join(cells) + " |")
        summary[target]["windows"] = runs
        summary[target]["referee"] = referee[target]
    (a.results / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    text = "\n".join(lines) + "\n"
    (a.results / "summary.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_remeasure", description=__doc__)
    p.add_argument("--model", default="/root/model")
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--rate", type=float, default=30.0)
    p.add_argument("--warm-s", type=float, default=8.0)
    p.add_argument("--window-s", type=float, default=40.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile", default="baseline", help="the vLLMs' deploy profile")
    p.add_argument("--served-name", default="model", help="the model name clients send")
    p.add_argument("--input-len", type=int, default=384)
    p.add_argument("--output-len", type=int, default=384)
    p.add_argument("--targets", default=",".join(TARGETS),
                   help="a subset of the targets; with two, each repeat swaps their GPUs")
    p.add_argument("--gpus", type=int, choices=(1, 2), default=2,
                   help="1: one vLLM, the targets one after another, their order rotated")
    p.add_argument("--report", action="store_true")
    a = p.parse_args(argv)
    chosen = [TARGETS.index(t) for t in a.targets.split(",")]
    a.results.mkdir(parents=True, exist_ok=True)
    if not a.report:
        started = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            backends = [f.result() for f in [pool.submit(vllm, a, g) for g in range(a.gpus)]]
        print(f"vLLMs up after {time.monotonic() - started:.0f} s", flush=True)
        proxies = []
        urls: list[dict[str, str]] = []
        try:
            for g, v in enumerate(backends):
                base = 8200 + 10 * g
                with ThreadPoolExecutor(3) as pool:
                    ps = [f.result() for f in [pool.submit(proxy, a, v.url, base + k, w, c)
                                               for k, w, c in ((1, 1, "off"), (2, 4, "off"),
                                                               (3, 1, "exact"))]]
                proxies += ps
                urls.append({"direct": v.url, "proxy-1w": ps[0].url, "proxy-4w": ps[1].url,
                             "proxy-cache-miss": ps[2].url})
            for repeat in range(a.repeats if a.gpus == 2 else 0):
                for pair in slots(chosen, repeat):
                    t0 = time.monotonic()
                    with ThreadPoolExecutor(2) as pool:
                        futures = [pool.submit(run_one, a, TARGETS[t], urls[g][TARGETS[t]],
                                               backends[g].url, repeat, g)
                                   for g, t in enumerate(pair)]
                        for f in futures:
                            f.result()
                    print(f"repeat {repeat}: {TARGETS[pair[0]]} on GPU 0, {TARGETS[pair[1]]}"
                          f" on GPU 1 in {time.monotonic() - t0:.0f} s", flush=True)
            for repeat in range(a.repeats if a.gpus == 1 else 0):
                k = repeat % len(chosen)
                for t in chosen[k:] + chosen[:k]:
                    t0 = time.monotonic()
                    run_one(a, TARGETS[t], urls[0][TARGETS[t]], backends[0].url, repeat, 0)
                    print(f"repeat {repeat}: {TARGETS[t]} in {time.monotonic() - t0:.0f} s",
                          flush=True)
        finally:
            for pr in proxies:
                pr.stop()
            for v in backends:
                v.stop()
    sys.stdout.write(report(a))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
