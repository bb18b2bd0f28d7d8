"""`bench/flags_gpu.py`'s report: per flag, the goodput of the flag and of its baseline in each
round, their ratio with the bracket the sweeps' bisection leaves, the most requests per second
answered, and vLLM's own counters at the goodput point; a markdown table, summary.json, a plot.

Every sweep is re-read from its points (`loadtest.sweep`'s rule: SLO met, at most 1 % of the
window's arrivals unsent), so a sweep stopped by the budget (no sweep.json) counts with the
points it has.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.flags_plan import flag_named
from loadtest.verdict import answered_rate, behind, meets, no_data, parse_slo, sent_rate, slo_value

FOLDER = re.compile(r"r(?P<round>\d+)-(?P<side>flag|base)-gpu(?P<gpu>\d+)")
COUNTERS = {"Prefix cache hit rate (%)": "prefix hit %", "KV-cache usage peak (%)": "KV peak %",
            "Preemptions": "preemptions", "Running requests peak": "running peak",
            "Waiting requests peak": "waiting peak",
            "Server mean queue time (ms)": "vLLM queue ms"}


def point(res: dict[str, Any], slo: dict[str, float], point_s: float) -> dict[str, Any]:
    """One point's verdict, answered rate and vLLM's counters (the sweep's own reading)."""
    window = float((res.get("windows") or {}).get("steady_s") or point_s)
    empty = no_data(res)
    srv = ((res.get("server_metrics") or {}).get("backend") or {}).get("summary") or {}
    return {"rate": float(res["request_rate"]), "meets": None if empty else meets(res, slo),
            "answered": answered_rate(res, window) if res.get("completed") else None,
            "behind": behind(res, sent_rate(res, window), window),
            "ttft_p99_ms": None if empty else slo_value(res, "p99_ttft_ms"),
            "counters": {k: float(srv[k]) for k in COUNTERS if k in srv}}


@dataclass(frozen=True)
class Sweep:
    flag: str
    round: int
    side: str  # "flag" or "base"
    gpu: int
    points: tuple[dict[str, Any], ...]
    finished: bool  # its sweep.json written (not stopped by the budget)

    @property
    def goodput(self) -> float | None:
        return max((p["rate"] for p in self.points if p["meets"]), default=None)

    @property
    def bracket(self) -> tuple[float, float]:
        """[met, missed): the goodput (0 when no rate met) and the lowest rate above it that
        missed (inf when none did: the goodput is only a lower bound)."""
        lo = self.goodput or 0.0
        return lo, min((p["rate"] for p in self.points if p["meets"] is False and p["rate"] > lo),
                       default=math.inf)

    @property
    def answered(self) -> float | None:
        return max((p["answered"] for p in self.points if p["answered"] is not None),
                   default=None)

    @property
    def fell_behind(self) -> bool:
        """Some point answered under 90 % of its offered rate: `answered` is the capacity, not
        a lower bound of it."""
        return any(p["behind"] for p in self.points)

    def at_goodput(self) -> dict[str, Any]:
        return next((p for p in self.points if p["rate"] == self.goodput), {})


def sweeps(results: Path, slo: str, point_s: float) -> list[Sweep]:
    rule = parse_slo(slo)
    out = []
    for folder in sorted(results.glob("*/r*-*-gpu*")):
        m = FOLDER.fullmatch(folder.name)
        files = sorted(folder.glob("point-*.json"))
        if not m or not folder.is_dir() or not files:
            continue
        pts = sorted((point(json.loads(f.read_text()), rule, point_s) for f in files),
                     key=lambda p: p["rate"])
        out.append(Sweep(folder.parent.name, int(m["round"]), m["side"], int(m["gpu"]),
                         tuple(pts), (folder / "sweep.json").exists()))
    return out


def ratio_bracket(flag: Sweep, base: Sweep) -> tuple[float | None, float, float]:
    """(flag goodput / baseline goodput, and the lowest and highest ratio their brackets
    allow); None when either met no rate, or was cut before it missed one (its goodput then
    only a lower bound: a cut round whose two sides met the first rate says nothing)."""
    (f_lo, f_hi), (b_lo, b_hi) = flag.bracket, base.bracket
    est = f_lo / b_lo if f_lo and b_lo and not (open_ended(flag) or open_ended(base)) else None
    return est, f_lo / b_hi, (f_hi / b_lo if b_lo else math.inf)


def open_ended(s: Sweep) -> bool:
    """Cut by the budget before any rate was missed: no upper end, no capacity."""
    return not s.finished and math.isinf(s.bracket[1])


def informative(rounds: list[tuple[Sweep, Sweep]]) -> list[tuple[Sweep, Sweep]]:
    """The rounds that bound the ratio: a round cut before a side missed a rate bounds nothing
    and is left out (unless every round was)."""
    return [(f, b) for f, b in rounds if not (open_ended(f) or open_ended(b))] or rounds


def combine(rounds: list[tuple[float | None, float, float]]) -> dict[str, Any]:
    """The rounds' ratios together: their geometric mean (with the GPUs swapped between rounds,
    a GPU's constant speed factor cancels) and the hull of their brackets."""
    ests = [e for e, _, _ in rounds if e]
    return {"estimate": math.prod(ests) ** (1 / len(ests)) if ests else None,
            "low": min((lo for _, lo, _ in rounds), default=None),
            "high": max((hi for _, _, hi in rounds), default=None), "n": len(rounds)}


def finite(obj: Any) -> Any:
    """JSON without Infinity: an unbounded bracket's end is null."""
    if isinstance(obj, float) and math.isinf(obj):
        return None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def num(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "–"
    return "∞" if math.isinf(x) else f"{x:.{digits}g}"


def shown(s: Sweep) -> str:
    lo, hi = s.bracket
    return f"{num(s.goodput)} [{num(lo)}, {num(hi)})" + ("" if s.finished else " (cut)")


def cap(s: Sweep) -> str:
    return ("" if s.fell_behind else "≥ ") + num(s.answered)


def ratio_text(r: dict[str, Any] | tuple[float | None, float, float]) -> str:
    est, lo, hi = (r["estimate"], r["low"], r["high"]) if isinstance(r, dict) else r
    return f"**{num(est)}×** [{num(lo)}, {num(hi)}]"


def pairs(found: list[Sweep]) -> dict[str, list[tuple[Sweep, Sweep]]]:
    """Per flag, its (flag, baseline) sweeps of each round that has both."""
    out: dict[str, list[tuple[Sweep, Sweep]]] = {}
    for s in found:
        if s.side == "flag":
            base = next((b for b in found if b.flag == s.flag and b.round == s.round
                         and b.side == "base"), None)
            if base is not None:
                out.setdefault(s.flag, []).append((s, base))
    return out


def binds(results: Path, name: str) -> str:
    saved = results / "plan.json"
    for f in json.loads(saved.read_text()).get("flags", []) if saved.exists() else []:
        if f["name"] == name:
            return f"{f['workload']}: {f['binds']}"
    try:
        f = flag_named(name)
    except ValueError:
        return "–"
    return f"{f.workload}: {f.binds}"


def report(results: Path, slo: str, point_s: float) -> str:
    found = sweeps(results, slo, point_s)
    by_flag = pairs(found)
    lines = [
        f"SLO {slo}, each point a {point_s:g} s window. Goodput: the highest offered rate (req/s)"
        " whose window met the SLO; [met, missed): the bracket the sweep's ladder and bisection "
        "leave (∞: no rate tried missed it). Ratio: flag / baseline, the geometric mean of the "
        "rounds' ratios (the GPUs swap between rounds, so a GPU's constant speed cancels); in "
        "brackets the range the rounds' bisection brackets allow: a bracket from n = 2 sweeps a "
        "side, not a confidence interval. Max answered: the most req/s a sweep's points answered "
        "(≥: no point fell behind the offered rate, so the capacity was not reached).", "",
        "| flag | workload: what the plan meant to bind | rounds | goodput ratio [bracket] "
        "| max answered ratio [range] |", "|---|---|---|---|---|"]
    summary: dict[str, Any] = {"slo": slo, "point_s": point_s, "flags": []}
    for name, rounds in by_flag.items():
        told = informative(rounds)
        good = combine([ratio_bracket(f, b) for f, b in told])
        caps = [f.answered / b.answered for f, b in told if f.answered and b.answered]
        answered = {"estimate": math.prod(caps) ** (1 / len(caps)) if caps else None,
                    "low": min(caps, default=None), "high": max(caps, default=None),
                    "n": len(caps)}
        used = str(len(rounds)) + (f" ({len(rounds) - len(told)} cut, left out)"
                                   if len(told) < len(rounds) else "")
        lines.append(f"| {name} | {binds(results, name)} | {used} | {ratio_text(good)} | "
                     f"{ratio_text(answered)} |")
        summary["flags"].append({"flag": name, "goodput_ratio": good, "answered_ratio": answered,
                                 "sweeps": [vars(s) | {"goodput": s.goodput,
                                                       "bracket": s.bracket,
                                                       "answered": s.answered,
                                                       "fell_behind": s.fell_behind}
                                            for pair in rounds for s in pair]})
    lines += ["", "| flag | round | GPU flag / baseline | flag goodput [bracket] | baseline "
              "goodput [bracket] | ratio [bracket] | max answered req/s flag / baseline |",
              "|---|---|---|---|---|---|---|"]
    for name, rounds in by_flag.items():
        lines += [f"| {name} | {f.round} | {f.gpu} / {b.gpu} | {shown(f)} | {shown(b)} | "
                  f"{ratio_text(ratio_bracket(f, b))} | {cap(f)} / {cap(b)} |" for f, b in rounds]
    lines += ["", "vLLM's own counters (its /metrics around each point) at each sweep's goodput "
              "point:", "", "| flag | round | server (GPU) | at req/s | "
              + " | ".join(COUNTERS.values()) + " |", "|---|---|---|---|" + "---|" * len(COUNTERS)]
    for name, rounds in by_flag.items():
        for s in (s for pair in rounds for s in pair):
            c = s.at_goodput().get("counters", {})
            lines.append(f"| {name} | {s.round} | {name if s.side == 'flag' else 'baseline'} "
                         f"({s.gpu}) | {num(s.goodput)} | "
                         + " | ".join(num(c.get(k)) for k in COUNTERS) + " |")
    alone = [s for s in found if s.flag not in by_flag or not any(
        s in pair for pair in by_flag[s.flag])]
    if alone:
        lines += ["", "Sweeps without their pair: " + ", ".join(
            f"{s.flag} round {s.round} {s.side} {shown(s)}" for s in alone)]
    (results / "summary.json").write_text(json.dumps(finite(summary), indent=1))
    text = "\n".join(lines) + "\n"
    (results / "summary.md").write_text(text)
    return text


def plot(results: Path, slo: str, title: str, path: Path, point_s: float = 15.0) -> Path:
    """Left: each flag's goodput ratio and bracket; then per flag, TTFT p99 from arrival
    against the offered rate, every point of every sweep (flag solid, baseline dashed)."""
    from loadtest.plots import pyplot, save

    found = sweeps(results, slo, point_s)
    by_flag = pairs(found)
    plt = pyplot()
    fig, axes = plt.subplots(1, 1 + max(1, len(by_flag)), figsize=(4 + 4 * len(by_flag), 4),
                             squeeze=False)
    names = list(by_flag)
    ratios = [combine([ratio_bracket(f, b) for f, b in informative(by_flag[n])]) for n in names]
    est = [r["estimate"] or 0.0 for r in ratios]
    top = max([*est, 1.0]) * 2
    low = [max(0.0, e - r["low"]) for e, r in zip(est, ratios, strict=True)]
    high = [min(top, r["high"]) - e for e, r in zip(est, ratios, strict=True)]
    ax = axes[0][0]
    ax.bar(names, est, yerr=[low, high], capsize=4, color="#1f77b4")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel("goodput flag / baseline", fontsize=8)
    ax.set_title("goodput ratio, bracket of 2 rounds", fontsize=9)
    ax.tick_params(labelsize=7)
    ttft = parse_slo(slo).get("p99_ttft_ms")
    for ax, name in zip(axes[0][1:], names, strict=False):
        for s in (s for pair in by_flag[name] for s in pair):
            pts = [p for p in s.points if p["ttft_p99_ms"] is not None]
            ax.plot([p["rate"] for p in pts], [p["ttft_p99_ms"] for p in pts], marker="o",
                    linestyle="-" if s.side == "flag" else "--", color=f"C{s.round - 1}",
                    label=f"{name if s.side == 'flag' else 'baseline'}, round {s.round} "
                          f"(GPU {s.gpu})")
        if ttft:
            ax.axhline(ttft, color="grey", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("offered req/s", fontsize=8)
        ax.set_ylabel("TTFT p99 from arrival (ms)", fontsize=8)
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    fig.suptitle(f"vLLM flags against baseline, goodput under {slo}: {title}", fontsize=9)
    save(fig, path, plt)
    return path
