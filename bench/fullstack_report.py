"""Reading `bench.fullstack_gpu`'s sweeps back: each point re-judged by the sweep's current rule
(old points' scheduled arrivals recounted), the goodputs, their table and the plot.

    python -m bench.fullstack_gpu --results DIR --report     # prints `report`
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from loadtest.schedule import offsets
from loadtest.stats import due_in
from loadtest.sweep import bracketed
from loadtest.verdict import left_unsent, no_data, parse_slo, slo_value

TARGETS = ("direct", "fullstack")
FOLDER = re.compile(r"r(?P<ratio>\d+(?:\.\d+)?)-(?P<target>direct|fullstack)"
                    r"(?:-(?P<profile>.+?))?(?:\.(?P<repeat>\d+))?")

def point_cache(folder: Path, rate: float | None) -> dict[str, Any]:
    """The answer cache's numbers at the point swept at `rate` (the goodput point)."""
    for f in sorted(folder.glob("point-*.json")):
        res = json.loads(f.read_text())
        if rate is not None and abs(float(res.get("request_rate") or 0) - rate) < 1e-9:
            return dict(res.get("cache") or {})
    return {}


SPEC = ("Spec-decode acceptance rate (%)", "Spec-decode acceptance length")


def point_spec(folder: Path, rate: float | None) -> dict[str, float]:
    """vLLM's speculative-decoding acceptance (rate %, mean accepted length) over the window of
    the point swept at `rate`, from the backend's counters (the load tester's summary of them);
    empty without speculation."""
    for f in sorted(folder.glob("point-*.json")):
        res = json.loads(f.read_text())
        if rate is not None and abs(float(res.get("request_rate") or 0) - rate) < 1e-9:
            srv = ((res.get("server_metrics") or {}).get("backend") or {}).get("summary") or {}
            return {k: float(srv[k]) for k in SPEC if k in srv}
    return {}


def arrival_bounds(res: dict[str, Any], key: str) -> tuple[float, float]:
    """A TTFT percentile (`key`, e.g. p99_ttft_ms) from the scheduled arrival: the measured one,
    or for points measured before it, its bounds from the TTFT and client-queue percentiles (at
    least the larger, at most the sum)."""
    arrival = res.get(key.replace("_ttft_", "_arrival_ttft_"))
    if arrival is not None:
        return float(arrival), float(arrival)
    ttft = float(res.get(key) or 0.0)
    queue = float(res.get(key.replace("_ttft_", "_client_queue_time_")) or 0.0)
    return max(ttft, queue), ttft + queue


def recounted(res: dict[str, Any]) -> dict[str, Any]:
    """A point with its window's scheduled arrivals (`scheduled_in_window`): for one measured
    before the load tester counted them, recounted from its seeded schedule."""
    win = res.get("windows") or {}
    steady, ramp = float(win.get("steady_s") or 0), float(win.get("ramp_s") or 0)
    if res.get("scheduled_in_window") is None and steady and res.get("request_rate") not in (
            None, "inf"):
        res = {**res, "scheduled_in_window": due_in(offsets(
            float(res["request_rate"]), float(res.get("burstiness") or 1.0),
            int(res.get("seed") or 0), None), ramp, ramp + steady)}
    return res


def judged(res: dict[str, Any], slo: dict[str, float]) -> bool | None:
    """A point by the sweep's rule of 2026-11-28 (over 1 % of the window's arrivals unsent:
    missed; TTFT from the scheduled arrival), also for points measured before it: their
    scheduled arrivals are recounted (`recounted`), and TTFT from arrival is bounded
    (`arrival_bounds`). None: no verdict, where the bounds straddle the SLO or the window drew
    no arrival (the sweep's `no_data`: nothing offered, neither met nor missed; until
    2026-11-28 a miss here, as every point without a successful request was). A point that
    had arrivals and answered none (failed, or never sent) still misses it."""
    res = recounted(res)
    if no_data(res):
        return None
    if not res.get("completed") or res.get("failed") or left_unsent(res):
        return False
    verdict: bool | None = True
    for key, ms in slo.items():
        if slo_value(res, key) is None:
            return False
        low, high = (arrival_bounds(res, key) if key.endswith("_ttft_ms")
                     else (float(slo_value(res, key)),) * 2)
        if low > ms:
            return False
        if high > ms:
            verdict = None
    return verdict


def rejudged(folder: Path, slo: dict[str, float]) -> dict[str, Any] | None:
    """A sweep's goodput by `judged`: the highest rate that met the SLO, bounded (the sweep's
    `bracketed`) when a higher rate missed it; `undecided` lists the rates whose verdict the old
    points cannot give, `no_data` those whose window drew no arrival (neither bounds it)."""
    found = [json.loads(f.read_text()) for f in sorted(folder.glob("point-*.json"))]
    points = [(float(res["request_rate"]), judged(res, slo)) for res in found]
    if not points or not slo:
        return None
    empty = {float(res["request_rate"]) for res in found if no_data(recounted(res))}
    best = max((r for r, ok in points if ok), default=None)
    decided = [{"offered_rate": r, "meets_slo": ok} for r, ok in points if ok is not None]
    return {"goodput_rate": best, "goodput_bounded": bracketed(decided, best),
            "undecided": sorted(r for r, ok in points if ok is None and r not in empty),
            "no_data": sorted(empty)}


def sweeps(results: Path, slo: str = "") -> list[dict[str, Any]]:
    """Every sweep: ratio, target, profile (folders without one: `baseline`), its goodput
    re-judged from its points by the current rule (`rejudged`); a sweep without its sweep.json
    (cut by a device budget) is read from its points alone and marked unfinished."""
    found = []
    for folder in sorted(f for f in results.glob("r*-*") if f.is_dir()):
        m = FOLDER.fullmatch(folder.name)  # r0.6-direct, r0.6-fullstack-tuned.2
        if not m:
            continue
        ratio, target, profile, repeat = m.group("ratio", "target", "profile", "repeat")
        profile = (profile or "baseline") + (f" #{repeat}" if repeat else "")
        judged_row = rejudged(folder, parse_slo(slo))
        if (folder / "sweep.json").exists():
            s = json.loads((folder / "sweep.json").read_text())
            row = {k: s.get(k) for k in ("goodput_rate", "knee_rate", "saturation_rate")}
            row["goodput_bounded"] = s.get("goodput_bounded", any(  # None: no data, no miss
                p["meets_slo"] is False for p in s.get("points", [])))
            row.update(judged_row or {})
        elif judged_row is not None:
            row = {"knee_rate": None, "saturation_rate": None, **judged_row}
            profile += " (unfinished)"
        else:
            continue
        found.append({"ratio": ratio, "target": target, "profile": profile, **row,
                      "cache": point_cache(folder, row["goodput_rate"]),
                      "spec": point_spec(folder, row["goodput_rate"])})
    return found


def goodput(row: dict[str, Any]) -> str:
    return f"{'' if row['goodput_bounded'] else '≥ '}{row['goodput_rate']}"


def report(a: argparse.Namespace) -> str:
    lines = [f"SLO {a.slo}; goodput = the highest offered rate (req/s) whose "
             f"{a.point_s:g} s window met it (≥: no rate tried missed the SLO, a lower bound); "
             "ratio = full stack / vLLM alone", "",
             "| repeat ratio | target | vLLM profile | goodput req/s | undecided rates | "
             "knee req/s | saturated at | hit rate at goodput | wrong cached answers |",
             "|---|---|---|---|---|---|---|---|---|"]
    rows = sweeps(a.results, a.slo)
    for r in rows:
        cache = r["cache"]
        hit = f"{cache['hit_share']:.2f}" if "hit_share" in cache else "–"
        undecided = ", ".join([f"{x:g}" for x in r.get("undecided") or []]
                              + [f"{x:g} (no data)" for x in r.get("no_data") or []]) or "–"
        lines.append(f"| {r['ratio']} | {r['target']} | {r['profile']} | {goodput(r)} | "
                     f"{undecided} | {r['knee_rate']} | {r['saturation_rate']} | {hit} | "
                     f"{cache.get('wrong_cached_answers', '–')} |")
    spec = [r for r in rows if r["spec"]]
    if spec:
        lines += ["", "| repeat ratio | target | vLLM profile | spec-decode acceptance at goodput "
                  "| mean accepted length |", "|---|---|---|---|---|"]
        lines += [f"| {r['ratio']} | {r['target']} | {r['profile']} | "
                  f"{r['spec'].get(SPEC[0], 0):.1f} % | {r['spec'].get(SPEC[1], 0):.2f} |"
                  for r in spec]
    lines += ["", "| repeat ratio | full stack (profile) | vLLM alone (profile) | goodput ratio |",
              "|---|---|---|---|"]
    summary: dict[str, Any] = {"sweeps": rows, "ratios": []}
    for full in (r for r in rows if r["target"] == "fullstack" and r["goodput_rate"]):
        for alone in (r for r in rows if r["target"] == "direct" and r["ratio"] == full["ratio"]
                      and r["goodput_rate"]):
            exact = (alone["goodput_bounded"], full["goodput_bounded"])
            mark = {(True, True): "", (True, False): "≥ ", (False, True): "≤ "}.get(exact, "? ")
            value = full["goodput_rate"] / alone["goodput_rate"]
            summary["ratios"].append({
                "ratio": full["ratio"], "fullstack_profile": full["profile"],
                "direct_profile": alone["profile"], "goodput_ratio": value,
                "goodput_ratio_is": {"": "exact", "≥ ": "a lower bound", "≤ ": "an upper bound",
                                     "? ": "unknown"}[mark]})
            lines.append(f"| {full['ratio']} | {goodput(full)} ({full['profile']}) | "
                         f"{goodput(alone)} ({alone['profile']}) | **{mark}{value:.2f}×** |")
    (a.results / "summary.json").write_text(json.dumps(summary, indent=1))
    text = "\n".join(lines) + "\n"
    (a.results / "summary.md").write_text(text)
    return text


def plot(a: argparse.Namespace, path: Path) -> Path:
    """TTFT p99 from arrival (for older points its upper bound) against the offered rate, every
    sweep point that answered, one line per sweep: one without answers (no arrival in its
    window, or every request failed) measured no TTFT, and until 2026-11-28 was drawn at 0."""
    from loadtest.plots import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    for folder in sorted(a.results.glob("r*-*/")):
        m = FOLDER.fullmatch(folder.name)
        points = [res for res in (json.loads(f.read_text()) for f in folder.glob("point-*.json"))
                  if res.get("completed")]
        if not m or not points:
            continue
        # by offered rate: past saturation the achieved rate falls back and a line by it zigzags
        pts = sorted(points, key=lambda r: float(r["request_rate"]))
        ratio, target = m.group("ratio", "target")
        profile = [m.group("profile") + (f" #{m.group('repeat')}" if m.group("repeat") else "")
                   ] if m.group("profile") else []
        ax.plot([float(r["request_rate"]) for r in pts],
                [arrival_bounds(r, "p99_ttft_ms")[1] for r in pts],
                marker="o", linestyle="-" if target == "fullstack" else "--",
                label=f"{'proxy + exact cache' if target == 'fullstack' else 'vLLM alone'}, "
                      f"{float(ratio):.0%} repeats" + (f", {profile[0]}" if profile else ""))
    slo = dict(item.split(":") for item in a.slo.split(","))
    if "ttft_p99" in slo:
        ax.axhline(float(slo["ttft_p99"]), color="grey", linewidth=0.8)
        ax.annotate("SLO", (1, float(slo["ttft_p99"])), fontsize=7, color="grey")
    ax.set_yscale("log")
    ax.set_xlabel("offered request rate (req/s)", fontsize=8)
    ax.set_ylabel("TTFT p99 from arrival (ms)", fontsize=8)
    ax.set_title(f"Full stack vs vLLM alone, {a.title}", fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save(fig, path, plt)
    return path
