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

`--profiles A,B` gives GPU 0 and GPU 1 their own vLLM profile (e.g. baseline beside a tuned
one): repeat a ratio (`--ratios 0.6,0.6`) and the second round swaps the targets, so the four
sweeps are the 2 x 2 of {vLLM alone, full stack} x {profile A, profile B} and the cache's gain
is told apart from the backend's. Folders are then `r<ratio>-<target>-<profile>`.
`--dataset FILE.jsonl` takes the fresh prompts from a file (the study's `code_edit`, on the
trained model: where n-gram speculation accepts) on /v1/completions, each row's own length.
`--proxy-workers N --redis-url URL` runs the proxy with N workers sharing one cache in Redis
(one worker alone is a relay limit past ~60 req/s of 384-token streams).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.fullstack_report import TARGETS, plot, report
from bench.gpu_remeasure import proxy, vllm
from bench.procs import PY, REPO


def name(results: Path, ratio: float, target: str, profile: str, tagged: bool) -> str:
    """The sweep's folder; a second sweep of the same ratio, target and profile gets `.2`."""
    base = f"r{ratio:g}-{target}" + (f"-{profile}" if tagged else "")
    n = 1
    while (results / (base + (f".{n}" if n > 1 else ""))).exists():
        n += 1
    return base + (f".{n}" if n > 1 else "")


def sweep(a: argparse.Namespace, ratio: float, target: str, url: str, backend: str,
          gpu: int, seed: int, folder: str) -> None:
    out = a.results / folder
    shape = (["--dataset-path", str(a.dataset), "--endpoint", "completions"] if a.dataset else
             ["--input-len", "384", "--output-len", "384", "--range-ratio", "0.33"])
    cmd = [PY, "-m", "loadtest", "sweep", "--target", url, "--model", a.served_name,
           "--tokenizer", a.model, "--workload", "repeat", "--repeat-ratio", f"{ratio:g}",
           "--zipf", "1.0", *shape, "--ignore-eos", "--max-concurrency", "250",
           "--start-rate", f"{start_rate(a, target):g}",
           "--factor", f"{a.factor:g}", "--max-rate", "400",
           "--point-duration", f"{a.point_s:g}",
           "--warmup-seconds", f"{a.warm_s:g}", "--slo", a.slo, "--bisect-steps",
           str(a.bisect_steps), "--workers", "auto", "--backend-url", backend, "--no-progress",
           "--label", f"{folder} gpu{gpu}", "--seed", str(seed), "--out", str(out)]
    with open(a.results / f"{folder}.log", "w") as log:
        subprocess.run(cmd, cwd=REPO, check=False, stdout=log, stderr=subprocess.STDOUT)


def start_rate(a: argparse.Namespace, target: str) -> float:
    """The sweep's first rate: the full stack may start higher on the same ladder (a rung of
    `--start-rate` times a power of `--factor`), so device time is not spent on rates it meets."""
    return float(a.fullstack_start_rate or a.start_rate) if target == "fullstack" else a.start_rate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.fullstack_gpu", description=__doc__)
    p.add_argument("--model", default="/root/model")
    p.add_argument("--served-name", default="model")
    p.add_argument("--profiles", default="baseline,baseline",
                   help="the vLLM profile on GPU 0 and on GPU 1 (one name: both)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="GPU:KEY=VALUE",
                   help="a vLLM flag for one GPU's server (deploy backend --set), repeatable")
    p.add_argument("--dataset", type=Path, default=None,
                   help="fresh prompts from this JSONL ({prompt, output_tokens}, e.g. "
                        "bench.study_workloads' code_edit) on /v1/completions, instead of "
                        "random 384-token chat prompts")
    p.add_argument("--title", default="repeat workload, 2x H200 (random 3B)",
                   help="the plot's subtitle")
    p.add_argument("--proxy-workers", type=int, default=1)
    p.add_argument("--redis-url", default=None,
                   help="the proxies' shared answer cache (needed for --proxy-workers > 1)")
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--ratios", default="0.3,0.6",
                   help="shares of exact repeats, one sweep pair (round) each; the targets "
                        "swap GPUs every round")
    p.add_argument("--slo", default="ttft_p99:1000,tpot_p99:50")
    p.add_argument("--start-rate", type=float, default=8.0)
    p.add_argument("--fullstack-start-rate", type=float, default=None,
                   help="the full stack's first rate (default --start-rate)")
    p.add_argument("--factor", type=float, default=1.5,
                   help="the ladder's step (a finer one resolves the goodput better)")
    p.add_argument("--point-s", type=float, default=30.0, help="measured window per point")
    p.add_argument("--warm-s", type=float, default=5.0, help="ramp-up before each window")
    p.add_argument("--bisect-steps", type=int, default=2)
    p.add_argument("--report", action="store_true")
    p.add_argument("--plot", type=Path, default=None, help="also write this PNG")
    a = p.parse_args(argv)
    a.results.mkdir(parents=True, exist_ok=True)
    profiles = (a.profiles.split(",") * 2)[:2]
    if a.proxy_workers > 1 and not a.redis_url:
        p.error("--proxy-workers > 1 needs --redis-url (each worker would hold its own cache)")
    if not a.report:
        run(a, profiles)
    sys.stdout.write(report(a))
    if a.plot:
        print(f"wrote {plot(a, a.plot)}")
    return 0


def run(a: argparse.Namespace, profiles: list[str]) -> None:
    tagged = a.profiles != "baseline,baseline"
    sets = [[s.split(":", 1)[1] for s in a.sets if s.split(":", 1)[0] == str(g)] for g in (0, 1)]
    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        backends = [f.result() for f in [
            pool.submit(vllm, argparse.Namespace(**{**vars(a), "profile": profiles[g]}), g,
                        sets[g]) for g in range(2)]]
    print(f"vLLMs up after {time.monotonic() - t0:.0f} s ({profiles[0]} on GPU 0, "
          f"{profiles[1]} on GPU 1)", flush=True)
    proxies = [proxy(a, v.url, 8300 + g, a.proxy_workers, "exact", a.redis_url, f"gpu{g}")
               for g, v in enumerate(backends)]
    try:
        for k, ratio in enumerate(float(r) for r in a.ratios.split(",")):
            t0 = time.monotonic()
            urls = [{"direct": v.url, "fullstack": px.url}
                    for v, px in zip(backends, proxies, strict=True)]
            order = TARGETS if k % 2 == 0 else TARGETS[::-1]  # target on GPU 0, GPU 1
            # both targets of a round get the same prompts (seed); each round its own (100 k)
            with ThreadPoolExecutor(2) as pool:
                for f in [pool.submit(sweep, a, ratio, t, urls[g][t], backends[g].url, g,
                                      100 * k, name(a.results, ratio, t, profiles[g], tagged))
                          for g, t in enumerate(order)]:
                    f.result()
            print(f"ratio {ratio:g}: {order[0]} on GPU 0, {order[1]} on GPU 1 in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
    finally:
        for proc in (*proxies, *backends):
            proc.stop()
            # the servers' own logs beside the results (a failed request's cause is there)
            shutil.copy(proc.log_path, a.results / proc.log_path.name)


if __name__ == "__main__":
    raise SystemExit(main())
