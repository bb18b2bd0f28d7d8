"""`python -m loadtest run|compare|mock`: arguments, validation with clear errors, dispatch."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time", "arrival_ttft",
                      "arrival_e2el")


def add_run_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("request")
    g.add_argument("--model", help="model name to send (default: the target's first model)")
    g.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    g.add_argument("--no-stream", action="store_true", help="non-streaming (TTFT = E2EL)")
    g.add_argument("--temperature", type=float, default=None)
    g.add_argument("--header", action="append", default=[], metavar="KEY:VALUE")
    g.add_argument("--extra-body", default=None, metavar="JSON", help="merged into every body")
    g.add_argument("--timeout", type=float, default=600.0, help="per-request timeout (s)")
    g.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="HF tokenizer: exact random prompt sizes; counts tokens without usage")
    w = p.add_argument_group("workload")
    w.add_argument("--workload",
                   choices=("random", "sharegpt", "prefix", "cache", "repeat", "custom"),
                   default="random",
                   help="repeat: random prompts (or --dataset-path's rows), a share "
                        "--repeat-ratio of them exact repeats (Zipf by --zipf): the cache's mix "
                        "at any rate; custom: a JSONL file's prompts")
    w.add_argument("--seed", type=int, default=0, help="seeds every random choice")
    w.add_argument("--input-len", type=int, default=128)
    w.add_argument("--output-len", type=int, default=32)
    w.add_argument("--range-ratio", type=float, default=0.0)
    w.add_argument("--ignore-eos", action="store_true")
    w.add_argument("--dataset-path", default=None,
                   help="sharegpt: ShareGPT-format JSON; custom and repeat: JSONL of "
                        '{"prompt": ..., "output_tokens": N} (vllm bench serve\'s custom format)')
    w.add_argument("--sharegpt-output-len", type=int, default=0,
                   help="override ShareGPT answer lengths (0: the answer's own length)")
    w.add_argument("--prefix-len", type=int, default=256)
    w.add_argument("--suffix-len", type=int, default=32)
    w.add_argument("--num-prefixes", type=int, default=4)
    w.add_argument("--cache-questions", type=int, default=200,
                   help="cache workload: distinct canonical questions to draw from")
    w.add_argument("--repeat-ratio", type=float, default=0.3,
                   help="cache and repeat workloads: share of exact repeats")
    w.add_argument("--paraphrase-ratio", type=float, default=0.2)
    w.add_argument("--near-miss-ratio", type=float, default=0.1)
    w.add_argument("--zipf", type=float, default=1.0, help="popularity exponent (0: uniform)")
    s = p.add_argument_group("load shape")
    s.add_argument("--num-prompts", type=int, default=None, help="default 100 without --duration")
    s.add_argument("--duration", type=float, default=None, help="seconds to keep sending")
    s.add_argument("--request-rate", type=float, default=math.inf, help="req/s (default inf)")
    s.add_argument("--burstiness", type=float, default=1.0, help="gamma shape; 1 = Poisson")
    s.add_argument("--max-concurrency", type=int, default=None)
    s.add_argument("--warmup", type=int, default=0, help="warm-up requests, not measured")
    s.add_argument("--warmup-seconds", type=float, default=0.0,
                   help="ramp-up: requests sent in the first S seconds are reported apart")
    s.add_argument("--cooldown-seconds", type=float, default=0.0,
                   help="drain: requests sent in the last S seconds are reported apart")
    s.add_argument("--workers", default="1", metavar="N|auto",
                   help="client processes sharing one schedule (auto: by the expected chunk "
                        "rate, at most half the cores)")
    s.add_argument("--repeats", type=int, default=1,
                   help="run K times (seeds --seed, --seed+1, ...): means with 95%% intervals")
    o = p.add_argument_group("output")
    o.add_argument("--percentile-metrics", default="ttft,tpot,itl")
    o.add_argument("--metric-percentiles", default="99")
    o.add_argument("--goodput", nargs="+", default=None, metavar="KEY:MS",
                   help="request_goodput: requests/s within these SLOs (ttft, tpot, e2el); "
                        "TTFT and E2EL from the scheduled arrival, as sweep --slo judges")
    o.add_argument("--json", default=None, metavar="PATH", help="write the result JSON")
    o.add_argument("--jsonl", default=None, metavar="PATH", help="per-request JSONL")
    o.add_argument("--save-detailed", action="store_true", help="per-request arrays in the JSON")
    o.add_argument("--label", default=None)
    o.add_argument("--metrics-url", action="append", default=[], metavar="[NAME=]URL",
                   help="extra /metrics to scrape (the target's own is scraped by default)")
    o.add_argument("--backend-url", default=None,
                   help="the vLLM behind a proxy: its /metrics is scraped too")
    o.add_argument("--no-scrape", action="store_true")
    o.add_argument("--no-progress", action="store_true")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m loadtest",
                                 description="Load tester for OpenAI-compatible servers.")
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="benchmark one target")
    run.add_argument("--target", required=True, help="base URL, e.g. http://127.0.0.1:8000")
    add_run_args(run)
    cmp = sub.add_parser("compare", help="same seeded workload against several targets")
    cmp.add_argument("--target", action="append", default=[], metavar="NAME=URL")
    cmp.add_argument("--results", action="append", default=[], metavar="[NAME=]FILE.json",
                     help="a saved `run --json` result to include (e.g. another profile)")
    cmp.add_argument("--baseline", default=None, help="ratios against this one (default first)")
    cmp.add_argument("--out", default="results/compare", help="folder for JSON, PNGs, report")
    add_run_args(cmp)
    mock = sub.add_parser("mock", help="fast mock OpenAI server with known latencies")
    mock.add_argument("--host", default="127.0.0.1")
    mock.add_argument("--port", type=int, default=8200)
    mock.add_argument("--ttft-ms", type=float, default=20.0)
    mock.add_argument("--itl-ms", type=float, default=5.0)
    mock.add_argument("--output-tokens", type=int, default=None,
                      help="tokens per answer (default: the request's max_tokens)")
    mock.add_argument("--cache", choices=("off", "exact"), default="off",
                      help="answer repeats from an exact cache, with X-Cache headers")
    mock.add_argument("--max-batch", type=int, default=0,
                      help="capacity model: answers generating at once (0: unlimited)")
    mock.add_argument("--itl-growth", type=float, default=0.0,
                      help="capacity model: each token costs itl*(1+G*(running-1))")
    mock.add_argument("--reuse-port", action="store_true",
                      help="let several mock processes share --port (SO_REUSEPORT)")
    sweep = sub.add_parser("sweep", help="request-rate ladder to saturation; SLO bisection")
    sweep.add_argument("--target", required=True, help="base URL")
    sweep.add_argument("--rates", default=None, metavar="R1,R2,...",
                       help="the ladder (default: --start-rate times --factor^k)")
    sweep.add_argument("--concurrencies", default=None, metavar="C1,C2,...",
                       help="a closed-loop concurrency ladder instead of the rate ladder")
    sweep.add_argument("--start-rate", type=float, default=1.0)
    sweep.add_argument("--factor", type=float, default=2.0)
    sweep.add_argument("--max-rate", type=float, default=1024.0)
    sweep.add_argument("--point-duration", type=float, default=60.0,
                       help="seconds of arrivals per point (steady state: >= 60 on a GPU)")
    sweep.add_argument("--slo", default=None, metavar="METRIC:MS,...",
                       help="e.g. ttft_p99:500,tpot_p99:50: bisect for the highest rate "
                            "meeting it (goodput)")
    sweep.add_argument("--bisect-steps", type=int, default=4)
    sweep.add_argument("--out", default="results/sweep", help="folder: a JSON per point, PNG")
    add_run_args(sweep)
    return ap


def check(ap: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    def need(ok: bool, msg: str) -> None:
        if not ok:
            ap.error(msg)

    if a.command == "mock":
        need(a.ttft_ms >= 0 and a.itl_ms >= 0, "--ttft-ms and --itl-ms must be >= 0")
        need(0 < a.port < 65536, "--port must be in 1..65535")
        need(a.max_batch >= 0 and a.itl_growth >= 0, "--max-batch, --itl-growth must be >= 0")
        need(a.output_tokens is None or a.output_tokens > 0, "--output-tokens must be > 0")
        return
    if a.command == "compare":
        need(len(a.target) + len(a.results) >= 2,
             "compare needs at least two of --target NAME=URL / --results FILE")
        for t in a.target:
            need("=" in t and t.split("=", 1)[1].startswith("http"),
                 f"--target {t!r}: expected NAME=http://host:port")
    else:
        if a.command == "sweep":
            from loadtest.sweep import check_args
            for msg in check_args(a):
                ap.error(msg)
        need(a.target.startswith(("http://", "https://")),
             f"--target {a.target!r}: expected a URL like http://127.0.0.1:8000")
    need(a.num_prompts is None or a.num_prompts > 0, "--num-prompts must be > 0")
    need(a.timeout > 0, "--timeout must be > 0 (seconds for one request)")
    if a.extra_body:
        try:
            extra = json.loads(a.extra_body)
        except ValueError as e:
            ap.error(f"--extra-body: not JSON ({e})")
        need(isinstance(extra, dict), "--extra-body must be a JSON object, e.g. '{\"top_p\": 1}'")
    for flag in ("--json", "--jsonl"):
        path = getattr(a, flag[2:], None)
        if path:
            where = Path(path)
            need(not where.is_dir(), f"{flag} {path}: is a folder; give a file name")
            need(where.parent.is_dir(), f"{flag} {path}: no folder {where.parent}")
    need(a.duration is None or not math.isinf(a.request_rate) or a.max_concurrency is not None,
         "--duration with no --request-rate needs --max-concurrency (else every request of the "
         "duration is sent at once)")
    if a.num_prompts is not None and not math.isinf(a.request_rate):
        span = a.num_prompts / a.request_rate  # about how long the arrivals last
        need(a.warmup_seconds + a.cooldown_seconds < span,
             f"--warmup-seconds + --cooldown-seconds must leave a steady window inside the "
             f"~{span:g} s of arrivals ({a.num_prompts} prompts at {a.request_rate:g} req/s)")
    need(a.duration is None or a.duration > 0, "--duration must be > 0")
    need(a.request_rate > 0, "--request-rate must be > 0 (use inf for all at once)")
    need(a.burstiness > 0, "--burstiness must be > 0")
    need(a.max_concurrency is None or a.max_concurrency > 0, "--max-concurrency must be > 0")
    need(a.warmup >= 0, "--warmup must be >= 0")
    need(a.warmup_seconds >= 0 and a.cooldown_seconds >= 0,
         "--warmup-seconds and --cooldown-seconds must be >= 0")
    need(a.duration is None or a.warmup_seconds + a.cooldown_seconds < a.duration,
         "--warmup-seconds + --cooldown-seconds must leave a steady window inside --duration")
    need(a.workers == "auto" or (a.workers.isdigit() and 1 <= int(a.workers) <= 256),
         f"--workers {a.workers!r}: expected auto or a number in 1..256")
    need(a.workers in ("1", "auto") or a.num_prompts is not None or a.duration is None
         or not math.isinf(a.request_rate),
         "--workers > 1 with --duration needs a finite --request-rate "
         "(a closed-loop duration run has no schedule to shard)")
    need(1 <= a.repeats <= 100, "--repeats must be in 1..100")
    need(0 < a.input_len <= 10**9 and 0 < a.output_len <= 10**9,
         "--input-len and --output-len must be in 1..1000000000")
    need(a.seed >= 0, "--seed must be >= 0")
    need(a.prefix_len >= 1 and a.num_prefixes >= 1, "--prefix-len and --num-prefixes must be >= 1")
    need(a.suffix_len >= 0, "--suffix-len must be >= 0")
    need(a.sharegpt_output_len >= 0, "--sharegpt-output-len must be >= 0 (0: the answer's own)")
    need(0 <= a.range_ratio < 1, "--range-ratio must be in [0, 1)")
    need(a.workload != "sharegpt" or a.dataset_path is not None,
         "--workload sharegpt needs --dataset-path FILE.json")
    need(a.workload != "custom" or a.dataset_path is not None,
         "--workload custom needs --dataset-path FILE.jsonl")
    need(a.dataset_path is None or a.workload in ("sharegpt", "custom", "repeat"),
         f"--dataset-path is read by the sharegpt, custom and repeat workloads, not "
         f"{a.workload}")
    ratios = (a.repeat_ratio, a.paraphrase_ratio, a.near_miss_ratio)
    need(all(0 <= r <= 1 for r in ratios) and sum(ratios) <= 1,
         "--repeat-ratio, --paraphrase-ratio, --near-miss-ratio: each in [0, 1], sum <= 1")
    need(a.zipf >= 0, "--zipf must be >= 0")
    need(a.cache_questions > 0, "--cache-questions must be > 0")
    bad = set(a.percentile_metrics.split(",")) - set(PERCENTILE_METRICS)
    need(not bad, f"--percentile-metrics: unknown {sorted(bad)}; allowed {PERCENTILE_METRICS}")
    try:
        ps = [float(p) for p in a.metric_percentiles.split(",")]
    except ValueError:
        ap.error(f"--metric-percentiles {a.metric_percentiles!r}: expected numbers like 50,99")
    need(all(0 < p <= 100 for p in ps), "--metric-percentiles must be in (0, 100]")
    for item in a.goodput or []:
        k, _, v = item.partition(":")
        need(k in ("ttft", "tpot", "e2el") and v.replace(".", "", 1).isdigit(),
             f"--goodput {item!r}: expected ttft|tpot|e2el:MILLISECONDS")
    for h in a.header:
        need(":" in h, f"--header {h!r}: expected KEY:VALUE")
    if a.num_prompts is None and a.duration is None:
        a.num_prompts = 100


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    check(ap, a)
    if a.command == "mock":
        from loadtest.mock import serve
        try:
            serve(a.host, a.port, a.ttft_ms / 1000, a.itl_ms / 1000, a.output_tokens,
                  a.cache == "exact", a.max_batch, a.itl_growth, a.reuse_port)
        except OSError as e:  # the port is taken, the host does not resolve
            print(f"error: cannot listen on {a.host}:{a.port} ({e})", file=sys.stderr)
            return 2
        return 0
    try:
        if a.command == "run":
            from loadtest.session import run_and_report
            res = run_and_report(a)
            return 0 if res["completed"] > 0 else 1
        if a.command == "sweep":
            if a.concurrencies:
                from loadtest.sweep_concurrency import sweep_concurrency
                sweep_concurrency(a)
                return 0
            from loadtest.sweep import sweep
            sweep(a)
            return 0
        from loadtest.compare import compare
        compare(a)
        return 0
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
