"""Issue 15 on a 2-GPU host: least-loaded vs prefix vs session routing over two vLLM replicas.

One vLLM per GPU (the `prefix-caching` profile, GPU block size 16, VLLM_SERVER_DEV_MODE=1 so the
prefix cache can be emptied between runs), one proxy per policy in front of both (answer cache
off, the model's tokenizer, PROXY_ROUTING_BLOCK_SIZE=16). Two datasets from
bench/routing_workload.py: `tenants` (100 tenants x ~2k-token system prompts, even) and
`hotspot` (80 % of requests share tenant 0's prompt). The load tester replays each with Poisson
arrivals; every (case, policy) runs `--repeats` times with its own seed, the prefix caches
emptied before each run.

    python -m bench.routing_gpu --model /root/model --results /root/routing --rate 30
    python -m bench.routing_gpu --results /root/routing --report   # the tables again

Per run (raw JSON under --results): the load tester's result (TTFT p50/p90/p99, throughput,
goodput at --goodput-ttft-ms, vLLM gauge peaks per replica), vLLM's prefix-cache hits/queries per
replica and the proxy's routed/affinity/spill counters per replica. The report gives means with
95 % Student-t intervals over the repeats, ratios against least-loaded, and the load imbalance
(busier replica's requests / the other's). Pick --rate where least-loaded runs at roughly
70-90 % of its capacity (a short `python -m loadtest sweep` against one replica finds it).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from bench.procs import PY, REPO, Proc
from bench.routing_workload import rows

POLICIES = ("least-loaded", "prefix", "session", "kv-events")
CASES = {"tenants": 0.0, "hotspot": 0.8}
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
        9: 2.262}


def interval(values: list[float]) -> dict[str, float]:
    mean = statistics.fmean(values)
    n = len(values)
    half = T975.get(n - 1, 1.96) * statistics.stdev(values) / math.sqrt(n) if n > 1 else math.inf
    return {"mean": mean, "low": mean - half, "high": mean + half, "n": n}


def scrape(url: str) -> dict[str, float]:
    """Counter samples we need, summed over label sets except `upstream`."""
    out: dict[str, float] = {}
    for line in httpx.get(url + "/metrics", timeout=30).text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        base = name.split("{")[0]
        if base in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                    "vllm:request_success_total", "vllm:prompt_tokens_total"):
            out[base] = out.get(base, 0.0) + float(value)
        elif base.startswith(("proxy_routed_requests_total", "proxy_routing_affinity_hits_total",
                              "proxy_routing_spills_total")):
            out[name] = float(value)
    return out


def kv_bytes(model: str, tenants: int, prefix_words: int, fraction: float) -> int:
    """KV-cache bytes per replica that hold `fraction` of all tenants' prompts: the cache must
    bind, or every policy finds every prefix cached and routing cannot matter."""
    cfg = json.loads((Path(model) / "config.json").read_text())
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    per_token = 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * head_dim * 2  # bf16
    from transformers import AutoTokenizer  # only where the model is

    tok = AutoTokenizer.from_pretrained(model)
    prompts = {r["conversations"][0]["value"].split("\n\n")[0]
               for r in rows(tenants, prefix_words, 0, tenants * 20, 0.0, 0)}
    tokens = sum(len(tok.encode(p)) for p in prompts)
    return int(fraction * tokens * per_token)


def vllm(name: str, a: argparse.Namespace, gpu: int, port: int, kv: int | None) -> Proc:
    """One replica on one GPU, publishing its KV-cache events on port + 1000 (kv-events)."""
    events = ('kv-events-config={"enable_kv_cache_events":true,"publisher":"zmq",'
              f'"endpoint":"tcp://*:{port + 1000}"}}')
    sets = [] if kv is None else [f"kv-cache-memory-bytes={kv}"]
    sets += [events, *a.vllm_set]
    return Proc(name, [PY, "-m", "deploy", "backend", "--profile", a.profile, "--model",
                       a.model, "--port", str(port), "--host", "127.0.0.1",
                       *(x for kv_ in sets for x in ("--set", kv_))],
                f"http://127.0.0.1:{port}",
                env={"CUDA_VISIBLE_DEVICES": str(gpu), "VLLM_SERVER_DEV_MODE": "1"},
                ready_path="/health", timeout=1200)


def proxy(replicas: list[str], policy: str, model: str, port: int, block: int) -> Proc:
    events = ",".join(f"tcp://127.0.0.1:{int(r.rsplit(':', 1)[1]) + 1000}" for r in replicas)
    env = {"PROXY_UPSTREAM": ",".join(replicas), "PROXY_PORT": str(port),
           "PROXY_ROUTING_KV_EVENTS": events,
           "PROXY_ROUTING": policy, "PROXY_ROUTING_BLOCK_SIZE": str(block), "PROXY_CACHE": "off",
           "PROXY_TOKENIZER": model, "PROXY_MAX_INFLIGHT": "4096", "PROXY_MAX_WAITING": "4096",
           "PROXY_QUEUE_TIMEOUT": "600", "PROXY_LOG_LEVEL": "warning"}
    return Proc(f"proxy-{policy}", [PY, "-m", "proxy", "serve"], f"http://127.0.0.1:{port}",
                env=env, timeout=300)


def one_run(a: argparse.Namespace, replicas: list[str], case: str, dataset: Path, policy: str,
            repeat: int) -> dict[str, Any]:
    for r in replicas:
        httpx.post(r + "/reset_prefix_cache", timeout=60).raise_for_status()
    out = a.results / f"{case}-{policy}-{repeat}.json"
    with proxy(replicas, policy, a.model, 8000, a.block_size) as p:
        before = {r: scrape(r) for r in [*replicas, p.url]}
        cmd = [PY, "-m", "loadtest", "run", "--target", p.url, "--workload", "sharegpt",
               "--dataset-path", str(dataset), "--sharegpt-output-len", str(a.output_len),
               "--ignore-eos", "--request-rate", str(a.rate), "--num-prompts",
               str(max(1, round(a.rate * a.duration))), "--seed", str(repeat),
               "--metric-percentiles", "50,90,99",
               "--goodput", f"ttft:{a.goodput_ttft_ms}", "--no-progress", "--json", str(out),
               "--metrics-url", f"a={replicas[0]}/metrics",
               "--metrics-url", f"b={replicas[1]}/metrics"]
        subprocess.run(cmd, cwd=REPO, check=True)
        after = {r: scrape(r) for r in [*replicas, p.url]}
    delta = {u: {k: v - before[u].get(k, 0.0) for k, v in after[u].items()} for u in after}
    result = json.loads(out.read_text())
    record = {"case": case, "policy": policy, "repeat": repeat, "loadtest": result,
              "counters": delta, "replicas": replicas, "proxy": p.url}
    out.write_text(json.dumps(record, indent=1))
    return record


def per_replica(record: dict[str, Any]) -> dict[str, dict[str, float]]:
    proxy_counts = record["counters"][record["proxy"]]
    out = {}
    for r in record["replicas"]:
        c = record["counters"][r]
        q = c.get("vllm:prefix_cache_queries_total", 0.0)
        routed = sum(v for k, v in proxy_counts.items()
                     if k.startswith("proxy_routed_requests_total") and f'"{r}"' in k)
        out[r] = {"hit_rate": c.get("vllm:prefix_cache_hits_total", 0.0) / q if q else 0.0,
                  "requests": routed,
                  "vllm_requests": c.get("vllm:request_success_total", 0.0),
                  "prefilled_tokens": q - c.get("vllm:prefix_cache_hits_total", 0.0)}
    return out


def report(results: Path) -> str:
    records = [json.loads(f.read_text()) for f in sorted(results.glob("*-*-*.json"))]
    lines = ["| case | policy | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | req/s | goodput req/s"
             " | prefix hit rate per replica | busier/other requests |",
             "|---|---|---|---|---|---|---|---|---|"]
    summary: dict[str, Any] = {}
    for case in CASES:
        for policy in POLICIES:
            runs = [r for r in records if r["case"] == case and r["policy"] == policy]
            if not runs:
                continue
            lt = [r["loadtest"] for r in runs]
            cell = {k: interval([float(x.get(k) or 0.0) for x in lt]) for k in (
                "median_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "request_throughput",
                "request_goodput")}
            reps = [per_replica(r) for r in runs]
            hit = [statistics.fmean(p[u]["hit_rate"] for p in reps) for u in reps[0]]
            counts = [sorted((p[u]["requests"] for u in p), reverse=True) for p in reps]
            imbalance = statistics.fmean(c[0] / c[1] if c[1] else math.inf for c in counts)
            summary[f"{case}/{policy}"] = {**cell, "hit_rate_per_replica": hit,
                                           "imbalance": imbalance}

            def fmt(k: str, cell: dict[str, dict[str, float]] = cell) -> str:
                v = cell[k]
                return f"{v['mean']:.1f} ± {(v['high'] - v['mean']):.1f}"

            lines.append(f"| {case} | {policy} | {fmt('median_ttft_ms')} | {fmt('p90_ttft_ms')}"
                         f" | {fmt('p99_ttft_ms')} | {fmt('request_throughput')} | "
                         f"{fmt('request_goodput')} | "
                         f"{' / '.join(f'{h:.2f}' for h in hit)} | {imbalance:.2f} |")
    for case in CASES:
        base = summary.get(f"{case}/least-loaded")
        for policy in POLICIES[1:]:
            s = summary.get(f"{case}/{policy}")
            if base and s:
                lines.append(f"\n{case}: {policy} TTFT p90 least-loaded/{policy} = "
                             f"{base['p90_ttft_ms']['mean'] / s['p90_ttft_ms']['mean']:.2f}x, "
                             f"throughput {policy}/least-loaded = "
                             f"{s['request_throughput']['mean'] / base['request_throughput']['mean']:.2f}x")  # noqa: E501
    (results / "summary.json").write_text(json.dumps(summary, indent=1))
    text = "\n".join(lines) + "\n"
    (results / "summary.md").write_text(text)
    return text


def plan(cases: list[str], policies: list[str], repeats: int) -> list[tuple[str, str, int]]:
    """Runs in the order they are worth most: every case and policy once before any repeat,
    the policies' order rotated per repeat (no policy always runs first after a reset)."""
    out = []
    for repeat in range(repeats):
        for case in cases:
            k = repeat % len(policies)
            out += [(case, p, repeat) for p in policies[k:] + policies[:k]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.routing_gpu", description=__doc__)
    p.add_argument("--model", default="/root/model")
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--rate", type=float, default=30.0, help="Poisson arrivals, req/s")
    p.add_argument("--duration", type=float, default=25.0, help="seconds of arrivals per run")
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--goodput-ttft-ms", type=float, default=2000.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--tenants", type=int, default=100)
    p.add_argument("--prefix-words", type=int, default=2000)
    p.add_argument("--kv-fraction", type=float, default=0.6,
                   help="each replica's KV cache holds this share of all tenants' prompts "
                        "(0: vLLM's default budget)")
    p.add_argument("--budget-s", type=float, default=math.inf,
                   help="stop starting runs when the next would end past this many seconds")
    p.add_argument("--policies", default="least-loaded,prefix,session")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--profile", default="prefix-caching", help="the replicas' deploy profile")
    p.add_argument("--block-size", type=int, default=16, help="the replicas' KV block size")
    p.add_argument("--vllm-set", action="append", default=[], metavar="KEY=VALUE",
                   help="a flag for both replicas (python -m deploy backend --set)")
    p.add_argument("--gpus", type=int, choices=(1, 2), default=2,
                   help="1: both replicas on GPU 0 (they share its compute: compare hit rates "
                        "and balance, not latency against a 2-GPU run)")
    p.add_argument("--share", type=float, default=0.45,
                   help="with --gpus 1: each replica's gpu-memory-utilization")
    p.add_argument("--report", action="store_true", help="only rebuild the report")
    a = p.parse_args(argv)
    a.results.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if not a.report:
        datasets = {}
        for case in a.cases.split(","):
            datasets[case] = a.results / f"dataset-{case}.json"
            datasets[case].write_text(json.dumps(rows(a.tenants, a.prefix_words, 32,
                                                      max(round(a.rate * a.duration), 4000),
                                                      CASES[case], 0)))
        kv = (kv_bytes(a.model, a.tenants, a.prefix_words, a.kv_fraction)
              if a.kv_fraction > 0 else None)
        print(f"KV cache per replica: {kv} bytes", flush=True)
        if a.gpus == 1:  # two replicas share GPU 0, started one after the other
            a.vllm_set = [f"gpu-memory-utilization={a.share}", *a.vllm_set]
            v0 = vllm("vllm-a", a, 0, 8101, kv)
            try:
                v1 = vllm("vllm-b", a, 0, 8102, kv)
            except BaseException:
                v0.stop()
                raise
        else:
            with ThreadPoolExecutor(2) as pool:  # both replicas start at once (minutes each)
                starting = [pool.submit(vllm, f"vllm-gpu{g}", a, g, 8101 + g, kv)
                            for g in (0, 1)]
            v0, v1 = (f.result() for f in starting)
        with v0, v1:
            print(f"replicas up after {time.monotonic() - started:.0f} s", flush=True)
            replicas = [v0.url, v1.url]
            longest = 0.0
            for case, policy, repeat in plan(a.cases.split(","), a.policies.split(","),
                                             a.repeats):
                if time.monotonic() - started + max(longest, a.duration) > a.budget_s:
                    print(f"budget: skipped {case} {policy} repeat {repeat} and the rest")
                    break
                t0 = time.monotonic()
                one_run(a, replicas, case, datasets[case], policy, repeat)
                longest = max(longest, time.monotonic() - t0)
                print(f"done: {case} {policy} repeat {repeat} in {time.monotonic() - t0:.0f} s",
                      flush=True)
    sys.stdout.write(report(a.results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
