"""The printed result block (vLLM's format and row names), the JSON file, per-request JSONL."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from loadtest.runner import RunOutput
from loadtest.stats import p_word, unsent

HEADERS = {"ttft": ("TTFT", "Time to First Token"),
           "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
           "itl": ("ITL", "Inter-token Latency"),
           "e2el": ("E2EL", "End-to-end Latency"),
           "client_queue_time": ("Client Queue Time", "Client-side Queueing"),
           "arrival_ttft": ("TTFT from arrival", "TTFT from Scheduled Arrival"),
           "arrival_e2el": ("E2EL from arrival", "E2EL from Scheduled Arrival")}


def row(label: str, value: Any) -> str:
    if isinstance(value, float):
        return f"{label:<40} {value:<10.2f}"
    return f"{label:<40} {value!s:<10}"


def section(title: str, fill: str = "-") -> str:
    return f"{title:{fill}^50}"


def block(res: dict[str, Any], percentile_metrics: Sequence[str],
          percentiles: Sequence[float]) -> str:
    out = [section(" Serving Benchmark Result ", "=")]
    add: Callable[[str, Any], None] = lambda label, v: out.append(row(label, v))  # noqa: E731
    add("Successful requests:", res["completed"])
    add("Failed requests:", res["failed"])
    if res.get("max_concurrency") is not None:
        add("Maximum request concurrency:", res["max_concurrency"])
    rate = res.get("request_rate", "inf")
    if rate != "inf" and not (isinstance(rate, float) and math.isinf(rate)):
        add("Request rate configured (RPS):", float(rate))
    add("Benchmark duration (s):", float(res["duration"]))
    win = res.get("windows")
    if win:  # the stats below are the steady window's; ramp-up and drain apart
        add("Steady window (s):", float(win["steady_s"]))
    if unsent(res) > 0:  # a capped client fell behind: load offered, never sent
        add("Scheduled in window, never sent:", unsent(res))
    if win:
        add("Ramp-up requests (apart):", win["ramp"]["completed"] + win["ramp"]["failed"])
        add("Drain requests (apart):", win["drain"]["completed"] + win["drain"]["failed"])
    add("Total input tokens:", res["total_input_tokens"])
    add("Total generated tokens:", res["total_output_tokens"])
    add("Request throughput (req/s):", float(res["request_throughput"]))
    if res.get("request_goodput") is not None:
        add("Request goodput (req/s):", float(res["request_goodput"]))
    add("Output token throughput (tok/s):", float(res["output_throughput"]))
    add("Peak output token throughput (tok/s):", float(res["max_output_tokens_per_s"]))
    add("Peak concurrent requests:", float(res["max_concurrent_requests"]))
    add("Total token throughput (tok/s):", float(res["total_token_throughput"]))
    for m in percentile_metrics:
        if f"mean_{m}_ms" not in res:
            continue
        short, header = HEADERS[m]
        out.append(section(header))
        add(f"Mean {short} (ms):", float(res[f"mean_{m}_ms"]))
        add(f"Median {short} (ms):", float(res[f"median_{m}_ms"]))
        for p in percentiles:
            add(f"P{p_word(p)} {short} (ms):", float(res[f"p{p_word(p)}_{m}_ms"]))
    if res.get("error_counts"):
        out.append(section("Errors (commonest first)"))
        out += [row(f"{n} x", msg[:80]) for msg, n in res["error_counts"].items()]
    out += cache_rows(res) + server_rows(res) + selfcheck_rows(res)
    out.append("=" * 50)
    return "\n".join(out)


def cache_rows(res: dict[str, Any]) -> list[str]:
    c = res.get("cache")
    if not c or c["hits"] + c["misses"] + c["bypassed"] == 0:
        return []
    out = [section("Cache (X-Cache)"), row("Cache hits:", c["hits"]),
           row("Cache misses:", c["misses"]), row("Cache bypassed:", c["bypassed"]),
           row("Cache hit rate (%):", c["hit_rate"] * 100),
           row("Upstream prompt tokens avoided:", c["upstream_prompt_tokens_avoided"]),
           row("Upstream output tokens avoided:", c["upstream_output_tokens_avoided"])]
    if "wrong_cached_answers" in c:
        out.append(row("Wrong cached answers:", c["wrong_cached_answers"]))
        out.append(row("Unverified cached answers:", c["unverified_cached_answers"]))
    for cls, s in res.get("by_cache", {}).items():
        out.append(row(f"Requests {cls}:", s["completed"]))
        out.extend(row(f"Mean {m.upper()} {cls} (ms):", float(s[f"mean_{m}_ms"]))
                   for m in ("ttft", "tpot", "e2el"))
    return out


def server_rows(res: dict[str, Any]) -> list[str]:
    """Each scraped /metrics' summary; under --repeats, summed over the runs (pool.server)."""
    out: list[str] = []
    for who, d in (res.get("server_metrics") or {}).items():
        summary = d.get("summary", {})
        if not summary:
            continue
        runs = d.get("runs", 1)
        out.append(section(f"Server metrics: {who}" + (f", summed over {runs} runs"
                                                        if runs > 1 else "")))
        for label, v in summary.items():
            out.append(row(label + ":", v))
    each = res.get("client_workers_runs") or []
    if len(each) > 1 and any(n > 1 for n in each):  # --repeats: each run's own
        out.append(section("Client processes (each run)"))
        out += [row(f"Client processes, run {i}:", n) for i, n in enumerate(each, 1)]
    return out


def selfcheck_rows(res: dict[str, Any]) -> list[str]:
    s = res.get("selfcheck")
    if not s:
        return []
    # under --repeats each figure is the worst of any run's (selfcheck.worst): the title says so
    title = f"Client self-check ({s['over']})" if s.get("over") else "Client self-check"
    rows = [section(title), row("Send lag P99 (ms):", s["send_lag_p99_ms"]),
            row("Event-loop lag P99 (ms):", s["loop_lag_p99_ms"]),
            row("Event-loop lag max (ms):", s["loop_lag_max_ms"]),
            row("Event-loop stalls:", s.get("loop_stalls", 0))]
    if s.get("client_processes", 1) > 1:
        return [*rows, row("Client processes:", s["client_processes"]),
                row("Client CPU, busiest process (%):", s["client_cpu_util"] * 100)]
    return [*rows, row("Client CPU use (%):", s["client_cpu_util"] * 100)]


def parse_block(text: str) -> dict[str, float | int]:
    """Read a printed block back (ours or vLLM's) into {row label: number}."""
    rows: dict[str, float | int] = {}
    inside = False
    for line in text.splitlines():
        if "Serving Benchmark Result" in line:
            inside = True
            continue
        if inside and line.startswith("=" * 50):
            break
        if inside and len(line) > 41 and line[39:41].strip() == "" and ":" in line[:40]:
            label, value = line[:40].rstrip(), line[41:].strip()
            try:
                rows[label.rstrip(":")] = int(value)
            except ValueError:
                rows[label.rstrip(":")] = float(value)
    return rows


def write_json(path: str, res: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_bytes(orjson.dumps(res, option=orjson.OPT_INDENT_2 |
                                        orjson.OPT_SERIALIZE_NUMPY))


def write_jsonl(path: str, runs: Sequence[RunOutput]) -> None:
    """One line per request; with several runs (--repeats) each line says which (`repeat`)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for i, run in enumerate(runs):
            for r in run.results:
                row = r.row(run.t0)
                if len(runs) > 1:
                    row["repeat"] = i
                f.write(orjson.dumps(row) + b"\n")
