"""How many streamed chunks per second the load tester times truthfully, by client processes.

The mock streams with known truth (TTFT, then one chunk every ITL); `--mock-processes` copies
share one port (SO_REUSEPORT), pinned to the first cores, so the server side is not the limit;
the load tester runs a closed loop of `--concurrency` streams (concurrency / ITL chunks per
second offered) with `--workers` 1, 2, 4, ... pinned to the remaining cores. For each it prints
the chunks per second achieved and the error of mean TTFT, TPOT and ITL against the truth,
and the self-check's verdict. The issue's goal: >= 30k chunks/s with TPOT and ITL within 3 %.

    python -m bench.events_rate --concurrency 300 --workers 1,2,4,8 --mock-processes 4 \\
        --json docs/results/events-rate.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.procs import PY, REPO, pin
from deploy.net import free_port, wait_http


def mock_processes(n: int, port: int, a: argparse.Namespace, cores: str | None
                   ) -> list[subprocess.Popen[bytes]]:
    cmd = [PY, "-m", "loadtest", "mock", "--port", str(port), "--reuse-port", "--ttft-ms",
           str(a.ttft_ms), "--itl-ms", str(a.itl_ms), "--output-tokens", str(a.output_tokens)]
    procs = [subprocess.Popen(pin(cores) + cmd, cwd=REPO, stdout=subprocess.DEVNULL)
             for _ in range(n)]
    wait_http(f"http://127.0.0.1:{port}/health", 30, procs[0])
    return procs


def one(url: str, workers: int, a: argparse.Namespace, cores: str | None, out: Path
        ) -> dict[str, Any]:
    cmd = [PY, "-m", "loadtest", "run", "--target", url, "--model", "mock", "--num-prompts",
           str(a.num_prompts), "--max-concurrency", str(a.concurrency), "--output-len",
           str(a.output_tokens), "--workers", str(workers), "--no-progress", "--no-scrape",
           "--json", str(out)]
    subprocess.run(pin(cores) + cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    res: dict[str, Any] = json.loads(out.read_text())
    truth_ttft, truth_itl = a.ttft_ms, a.itl_ms
    chunks = res["completed"] * a.output_tokens
    return {
        "workers": res.get("client_workers", workers),
        "chunks_per_s": chunks / res["duration"],
        "mean_ttft_ms": res["mean_ttft_ms"], "mean_tpot_ms": res["mean_tpot_ms"],
        "mean_itl_ms": res["mean_itl_ms"], "p99_itl_ms": res["p99_itl_ms"],
        "ttft_err": res["mean_ttft_ms"] / truth_ttft - 1,
        "tpot_err": res["mean_tpot_ms"] / truth_itl - 1,
        "itl_err": res["mean_itl_ms"] / truth_itl - 1,
        "client_cpu_util": res["selfcheck"]["client_cpu_util"],
        "loop_lag_p99_ms": res["selfcheck"]["loop_lag_p99_ms"],
        "warnings": res["selfcheck"]["warnings"],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.events_rate", description=__doc__)
    p.add_argument("--concurrency", type=int, default=300)
    p.add_argument("--workers", default="1,2,4,8")
    p.add_argument("--mock-processes", type=int, default=4)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--output-tokens", type=int, default=200)
    p.add_argument("--num-prompts", type=int, default=3000)
    p.add_argument("--cores", default=None, metavar="FIRST-LAST",
                   help="the cores to use (default: all); the mocks get the first ones")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    first, last = (map(int, a.cores.split("-")) if a.cores
                   else (0, (os.cpu_count() or 2) - 1))
    cores = last - first + 1
    split = min(a.mock_processes, cores // 2)
    mock_cores = f"{first}-{first + split - 1}" if cores >= 4 else None
    client_cores = f"{first + split}-{last}" if cores >= 4 else None
    port = free_port()
    mocks = mock_processes(a.mock_processes, port, a, mock_cores)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for w in (int(x) for x in a.workers.split(",")):
                row = one(f"http://127.0.0.1:{port}", w, a, client_cores, Path(tmp) / f"{w}.json")
                rows.append(row)
                print(f"workers {row['workers']}: {row['chunks_per_s']:,.0f} chunks/s, TTFT "
                      f"{row['ttft_err']:+.1%}, TPOT {row['tpot_err']:+.1%}, ITL "
                      f"{row['itl_err']:+.1%} (p99 {row['p99_itl_ms']:.1f} ms), client CPU "
                      f"{row['client_cpu_util']:.0%}, warnings: {len(row['warnings'])}",
                      flush=True)
                for w_ in row["warnings"]:
                    print(f"    {w_}")
    finally:
        for m in mocks:
            m.kill()
            m.wait()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"args": vars(a) | {"json": str(a.json)}, "cores": cores,
                                      "truth": {"ttft_ms": a.ttft_ms, "itl_ms": a.itl_ms},
                                      "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
