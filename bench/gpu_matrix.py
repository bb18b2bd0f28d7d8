"""The reference experiment matrix on a GPU host, one backend profile at a time.

Runs on the device machine (see docs/benchmarks.md "On a GPU"): for each step it starts vLLM
with a profile (python -m deploy backend), waits for /health, runs the load tester's seeded
workloads against it (directly, and through the proxy where the step says so), stops it, and
keeps every result JSON under --results. `--report` then builds the side-by-side comparison
(table with ratios, PNG plots, Markdown) with `python -m loadtest compare --results ...`.

    python -m bench.gpu_matrix --model /root/model --results /root/results --steps baseline,fp8-kv
    python -m bench.gpu_matrix --results /root/results --report /root/results/report
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.procs import spawn, stop_group
from deploy.net import wait_http

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable

# The reference workload: 250 concurrent users, 50 req/s offered, 256-512 input tokens,
# <= 512 output tokens (384 +/- 33%), fixed lengths (ignore_eos) so profiles are comparable.
REFERENCE = ["--workload", "random", "--input-len", "384", "--output-len", "384",
             "--range-ratio", "0.33", "--ignore-eos", "--request-rate", "50",
             "--max-concurrency", "250"]
PREFIX = ["--workload", "prefix", "--prefix-len", "1024", "--suffix-len", "128",
          "--num-prefixes", "8", "--output-len", "128", "--ignore-eos", "--request-rate", "50",
          "--max-concurrency", "250"]
CACHE = ["--workload", "cache", "--cache-questions", "200", "--repeat-ratio", "0.3",
         "--paraphrase-ratio", "0.2", "--near-miss-ratio", "0.1", "--zipf", "1.0",
         "--output-len", "256", "--request-rate", "50", "--max-concurrency", "250"]


@dataclass
class Run:
    name: str
    workload: list[str]
    via_proxy: str | None = None  # None = vLLM direct; else PROXY_CACHE value
    workers: int = 1  # PROXY_WORKERS for the proxy


@dataclass
class Step:
    profile: str
    sets: list[str] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)


KV_BOUND = ["kv-cache-memory-bytes=2G"]

STEPS: dict[str, Step] = {
    "baseline": Step("baseline", runs=[
        Run("baseline", REFERENCE),
        Run("proxy-cache-off", REFERENCE, via_proxy="off"),
        Run("prefix-wl-baseline", PREFIX),
        Run("cache-wl-direct", CACHE),
        Run("cache-wl-proxy-cache-on", CACHE, via_proxy="semantic"),
    ]),
    # The proxy's own cost at the reference load, one worker vs four (one event loop relays
    # ~12k SSE events/s at most), cache off and on.
    "proxy-workers": Step("baseline", runs=[
        Run("baseline-2", REFERENCE),
        Run("proxy-cache-off-1w", REFERENCE, via_proxy="off"),
        Run("proxy-cache-off-4w", REFERENCE, via_proxy="off", workers=4),
        Run("cache-wl-direct-2", CACHE),
        Run("cache-wl-proxy-cache-on-1w", CACHE, via_proxy="semantic"),
        Run("cache-wl-proxy-cache-on-4w", CACHE, via_proxy="semantic", workers=4),
    ]),
    # The backend flags with the steady-state rig (issue 13): each flag against the same
    # workload on the baseline profile, one run list per server.
    "baseline-ref": Step("baseline", runs=[Run("baseline-ref", REFERENCE)]),
    "baseline-prefix-wl": Step("baseline", runs=[Run("baseline-prefix-wl", PREFIX)]),
    "max-num-seqs-64": Step("baseline", ["max-num-seqs=64"], [Run("max-num-seqs-64", REFERENCE)]),
    "fp8-kv": Step("fp8-kv", runs=[Run("fp8-kv", REFERENCE)]),
    "chunked-prefill": Step("chunked-prefill", runs=[Run("chunked-prefill", REFERENCE)]),
    "prefix-caching": Step("prefix-caching", runs=[Run("prefix-wl-prefix-caching", PREFIX)]),
    "spec-ngram": Step("spec-ngram", runs=[Run("spec-ngram", REFERENCE)]),
    "kvbound-baseline": Step("baseline", KV_BOUND, [Run("kvbound-baseline", REFERENCE)]),
    "kvbound-fp8": Step("fp8-kv", KV_BOUND, [Run("kvbound-fp8-kv", REFERENCE)]),
    # A smoke run of this script on a CPU box (the tiny model), not part of the matrix.
    "cpu-smoke": Step("cpu-tiny", runs=[
        Run("cpu-direct", ["--workload", "random", "--input-len", "64", "--output-len", "16",
                           "--request-rate", "20", "--max-concurrency", "8"]),
        Run("cpu-proxy", ["--workload", "random", "--input-len", "64", "--output-len", "16",
                          "--request-rate", "20", "--max-concurrency", "8"], via_proxy="off"),
    ]),
}


def workload(run: Run, rate: float | None) -> list[str]:
    """The run's workload arguments, its request rate replaced by --rate when given."""
    args = list(run.workload)
    if rate is not None and "--request-rate" in args:
        args[args.index("--request-rate") + 1] = f"{rate:g}"
    return args


def loadtest(target: str, run: Run, out: Path, args: argparse.Namespace,
             backend: str | None) -> None:
    cmd = [PY, "-m", "loadtest", "run", "--target", target, "--model", args.served_name,
           "--seed", "0", "--warmup", "10", "--tokenizer", args.model, "--label", run.name,
           "--no-progress", "--json", str(out / f"{run.name}.json"), "--workers", args.workers,
           "--repeats", str(args.repeats), *workload(run, args.rate)]
    if args.duration:  # the steady-state rig: a timed warm-up, then a window of arrivals
        cmd += ["--duration", str(args.warmup_seconds + args.duration),
                "--warmup-seconds", str(args.warmup_seconds)]
    else:
        cmd += ["--num-prompts", str(args.num_prompts)]
    cmd += ["--backend-url", backend or target]  # vLLM's own histograms: the referee
    print(f"[{time.strftime('%X')}] run {run.name}", flush=True)
    subprocess.run(cmd, cwd=REPO, check=False)


def port_free(url: str) -> bool:
    try:
        httpx.get(url + "/health", timeout=1)
    except httpx.HTTPError:
        return True
    return False


def run_step(name: str, step: Step, args: argparse.Namespace, out: Path) -> None:
    port, pport = args.vllm_port, args.proxy_port
    vurl = f"http://127.0.0.1:{port}"
    if not port_free(vurl):  # a leftover server would silently answer for the wrong profile
        raise SystemExit(f"something already answers on {vurl}: stop it first")
    cmd = [PY, "-m", "deploy", "backend", "--profile", step.profile, "--port", str(port),
           "--model", args.model]
    for item in step.sets:
        cmd += ["--set", item]
    print(f"[{time.strftime('%X')}] step {name}: {' '.join(cmd[2:])}", flush=True)
    t0 = time.monotonic()
    env = {} if args.gpu is None else {"CUDA_VISIBLE_DEVICES": args.gpu}
    vllm = spawn(cmd, out / f"vllm-{name}.log", env)
    try:
        wait_http(vurl + "/health", args.start_timeout, vllm, interval=1)
        print(f"  vLLM up in {time.monotonic() - t0:.0f}s", flush=True)
        for run in step.runs:
            if run.via_proxy is None:
                loadtest(vurl, run, out, args, None)
                continue
            env = {"PROXY_UPSTREAM": vurl, "PROXY_PORT": str(pport), "PROXY_CACHE": run.via_proxy,
                   "PROXY_WORKERS": str(run.workers),
                   "PROXY_MAX_INPUT_TOKENS": "3500", "PROXY_MAX_OUTPUT_TOKENS": "512"}
            proxy = spawn([PY, "-m", "proxy", "serve"], out / f"proxy-{run.name}.log", env)
            try:
                wait_http(f"http://127.0.0.1:{pport}/health", 300, proxy, interval=1)
                loadtest(f"http://127.0.0.1:{pport}", run, out, args, vurl)
            finally:
                stop_group(proxy, 30)
    finally:
        stop_group(vllm, 30)


def report(results: Path, out: Path) -> None:
    files = sorted(results.glob("*.json"))
    cmd = [PY, "-m", "loadtest", "compare", "--out", str(out)]
    for f in files:
        cmd += ["--results", f"{f.stem}={f}"]
    subprocess.run(cmd, cwd=REPO, check=False)


def _stop_on_term(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # unwinds run_step's finally blocks: no orphaned vLLM


def main() -> int:
    signal.signal(signal.SIGTERM, _stop_on_term)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="/root/model")
    ap.add_argument("--served-name", default="model")
    ap.add_argument("--results", type=Path, required=True)
    default_steps = [s for s in STEPS if s not in ("cpu-smoke", "proxy-workers", "baseline-ref",
                                                     "baseline-prefix-wl")]
    ap.add_argument("--steps", default=",".join(default_steps),
                    help=f"comma list of {list(STEPS)}")
    ap.add_argument("--num-prompts", type=int, default=400)
    ap.add_argument("--duration", type=float, default=None,
                    help="seconds of measured arrivals per run (instead of --num-prompts)")
    ap.add_argument("--warmup-seconds", type=float, default=10.0,
                    help="with --duration: arrivals before the window, not measured")
    ap.add_argument("--repeats", type=int, default=1, help="runs per cell (mean and 95%% CI)")
    ap.add_argument("--rate", type=float, default=None,
                    help="request rate for every run instead of the workload's own")
    ap.add_argument("--workers", default="auto", help="client processes (N or auto)")
    ap.add_argument("--start-timeout", type=float, default=420)
    ap.add_argument("--gpu", default=None, help="CUDA_VISIBLE_DEVICES for vLLM (default: inherit)")
    ap.add_argument("--vllm-port", type=int, default=8100)
    ap.add_argument("--proxy-port", type=int, default=8000)
    ap.add_argument("--report", type=Path, default=None, help="only build the comparison")
    args = ap.parse_args()
    args.results.mkdir(parents=True, exist_ok=True)
    if args.report:
        report(args.results, args.report)
        return 0
    for name in [s for s in args.steps.split(",") if s]:
        if name not in STEPS:
            ap.error(f"unknown step {name!r}; known: {', '.join(STEPS)}")
        run_step(name, STEPS[name], args, args.results)
    meta = {"python": sys.version, "steps": args.steps, "num_prompts": args.num_prompts,
            "duration": args.duration, "warmup_seconds": args.warmup_seconds,
            "repeats": args.repeats, "workers": args.workers, "rate": args.rate,
            "gpu": args.gpu}
    (args.results / "meta.txt").write_text(json.dumps(meta) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
