"""`compare`: the same seeded workload against several targets (or saved runs), side by side."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from loadtest import ci, plots, report, session
from loadtest.stats import p_word

Getter = Callable[[dict[str, Any]], float | None]
LOWER, HIGHER, NEUTRAL = "lower", "higher", ""


def key(name: str) -> Getter:
    return lambda r: r.get(name)


def server(label: str) -> Getter:
    def get(r: dict[str, Any]) -> float | None:
        for who in ("backend", "target"):
            v = (r.get("server_metrics") or {}).get(who, {}).get("summary", {}).get(label)
            if v is not None:
                return float(v)
        return None
    return get


def cache(name: str, scale: float = 1.0) -> Getter:
    def get(r: dict[str, Any]) -> float | None:
        c = r.get("cache") or {}
        return None if name not in c else float(c[name]) * scale
    return get


def rows(percentiles: list[float]) -> list[tuple[str, Getter, str]]:
    out: list[tuple[str, Getter, str]] = [
        ("Successful requests", key("completed"), HIGHER),
        ("Failed requests", key("failed"), LOWER),
        ("Request throughput (req/s)", key("request_throughput"), HIGHER),
        ("Output token throughput (tok/s)", key("output_throughput"), HIGHER),
        ("Total token throughput (tok/s)", key("total_token_throughput"), HIGHER)]
    for m, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        out.append((f"Mean {name} (ms)", key(f"mean_{m}_ms"), LOWER))
        out += [(f"P{p_word(p)} {name} (ms)", key(f"p{p_word(p)}_{m}_ms"), LOWER)
                for p in percentiles]
    out += [("Cache hit rate (%)", cache("hit_rate", 100), HIGHER),
            ("Wrong cached answers", cache("wrong_cached_answers"), LOWER),
            ("Upstream output tokens avoided", cache("upstream_output_tokens_avoided"), HIGHER),
            ("Prefix cache hit rate (%)", server("Prefix cache hit rate (%)"), HIGHER),
            ("Spec-decode acceptance rate (%)", server("Spec-decode acceptance rate (%)"),
             HIGHER),
            ("Preemptions", server("Preemptions"), LOWER),
            ("KV-cache usage peak (%)", server("KV-cache usage peak (%)"), NEUTRAL)]
    return out


def fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if float(v).is_integer() else f"{v:.2f}"


def table(entries: list[tuple[str, dict[str, Any]]], percentiles: list[float],
          baseline: int = 0) -> list[list[str]]:
    """Header + one row per metric; other columns show value (ratio to the baseline)."""
    head = ["Metric"] + [n + (" (baseline)" if i == baseline else "")
                         for i, (n, _) in enumerate(entries)]
    out = [head]
    for label, get, _ in rows(percentiles):
        vals = [get(r) for _, r in entries]
        if all(v is None for v in vals):
            continue
        base = vals[baseline]
        reps = [_interval(r, label, percentiles) for _, r in entries]
        cells = [label]
        for i, v in enumerate(vals):
            cell = fmt(v)
            rep = reps[i]
            if rep is not None:
                cell += f" ±{rep['half']:.2f}"
            if i != baseline and v is not None and base:
                cell += f" ({v / base:.2f}x"
                a, b = reps[i], reps[baseline]
                cell += ", n.s.)" if a is not None and b is not None and \
                    not ci.significant(a, b) else ")"
            cells.append(cell)
        out.append(cells)
    return out


def _interval(r: dict[str, Any], label: str,
              percentiles: list[float]) -> dict[str, Any] | None:
    """The repeats' interval behind a table row, when the result has one."""
    names = {"Request throughput (req/s)": "request_throughput",
             "Output token throughput (tok/s)": "output_throughput"}
    for m, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
        names[f"Mean {name} (ms)"] = f"mean_{m}_ms"
        names.update({f"P{p_word(p)} {name} (ms)": f"p{p_word(p)}_{m}_ms" for p in percentiles})
    found: dict[str, Any] | None = (r.get("repeats") or {}).get(names.get(label, ""))
    return found


def text_table(t: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in t) for i in range(len(t[0]))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(r, widths, strict=True))) for r in t]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def markdown(t: list[list[str]], entries: list[tuple[str, dict[str, Any]]],
             pngs: list[str]) -> str:
    md = ["# Load test comparison", "",
          "Same seeded workload against each target; ratios are against the baseline. With "
          "--repeats: ± is the 95% interval's half-width, and n.s. marks a difference from the "
          "baseline that Welch's t-test (5%) does not support.", "",
          "| " + " | ".join(t[0]) + " |", "|" + "---|" * len(t[0])]
    md += ["| " + " | ".join(r) + " |" for r in t[1:]]
    md += ["", "## Runs", ""]
    for name, r in entries:
        md.append(f"- **{name}**: {r.get('target', '?')}, workload {r.get('workload', '?')}, "
                  f"seed {r.get('seed', '?')}, rate {r.get('request_rate')}, "
                  f"concurrency {r.get('max_concurrency')}, {r.get('completed')} requests")
        md += [f"  - warning: {w}" for w in (r.get("selfcheck") or {}).get("warnings", [])]
    md += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in pngs]
    return "\n".join(md) + "\n"


def load(spec: str) -> tuple[str, dict[str, Any]]:
    name, _, path = spec.rpartition("=")
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"--results {path}: no such file")
    try:
        res = orjson.loads(p.read_bytes())
    except orjson.JSONDecodeError as e:
        raise ValueError(f"--results {path}: not JSON ({e})") from None
    if not isinstance(res, dict) or "completed" not in res:
        raise ValueError(f"--results {path}: not a result of `python -m loadtest run` "
                         "(no 'completed' field)")
    return name or res.get("label") or p.stem, res


def compare(a: argparse.Namespace) -> list[tuple[str, dict[str, Any]]]:
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {a.out}: exists and is not a folder")
    saved = [load(spec) for spec in a.results]  # a bad file stops us before any run
    names = [t.split("=", 1)[0] for t in a.target] + [n for n, _ in saved]
    if a.baseline is not None and a.baseline not in names:
        raise ValueError(f"--baseline {a.baseline!r} is not one of {names}")
    out.mkdir(parents=True, exist_ok=True)
    tok = session.load_tokenizer(a)
    p = session.plan(a)
    entries: list[tuple[str, dict[str, Any]]] = []
    for spec in a.target:
        name, url = spec.split("=", 1)
        print(f"== {name}: {url}", flush=True)
        outs, res = asyncio.run(session.measure(a, url, tok))
        res["label"] = name
        print(report.block(res, p.percentile_metrics, p.percentiles), flush=True)
        report.write_json(str(out / f"{name}.json"), res)
        report.write_jsonl(str(out / f"{name}.requests.jsonl"), outs)
        entries.append((name, res))
        if res.get("interrupted"):  # Ctrl-C: this target's files are written; stop here
            raise KeyboardInterrupt
    entries += saved
    t = table(entries, p.percentiles, names.index(a.baseline) if a.baseline else 0)
    print(text_table(t), flush=True)
    pngs = plots.write_all(entries, out, p.percentiles)
    (out / "report.md").write_text(markdown(t, entries, pngs))
    print(f"wrote {out}/report.md and {len(pngs)} plots", flush=True)
    return entries
