"""`loadtest sweep`: a request-rate ladder from light load to saturation, then (with --slo) a
bisection for the highest rate that meets the SLO: the goodput rate.

Each point is an open-loop run (Poisson arrivals at the offered rate for --point-duration s,
then a drain). A point is saturated when the server no longer keeps up: it answered
(`answered_rate`: the window's answers per second, at the pace they kept against the
arrivals) less than 90 % of the offered rate, or its mean TTFT grew past 3x the lightest
answered point's (requests queue). "Offered" is what the
schedule put in the window (Poisson counts vary around the nominal rate, so a short point is
not called saturated for drawing few arrivals), counted whether or not a --max-concurrency
client managed to send it. A TTFT SLO counts from each request's scheduled arrival (the wait
for a client slot is a wait for the first token all the same), and a point that left more than
1 % of its arrivals unsent misses the SLO: until 2026-11-28 a capped client hid a growing
queue, and a saturated server "met" a TTFT SLO at any rate. (Not "answered below 90 % of the
offered rate": that reading is biased low when answers are long against the window.) Without an
SLO the ladder stops at the first saturated point; the knee is the last rate before it. With
one, a point whose TTFT grew but still meets the SLO does not stop it (queueing that the SLO
allows is still goodput): the ladder goes on until a point misses the SLO or falls behind the
offered rate, so the bisection has a rate above the goodput to close on. When no rate tried
missed the SLO, the goodput is only a lower bound, and is reported so ("goodput_bounded").
A point whose window drew no arrival (a low rate's Poisson draw can) has no data: "no_data"
true, neither saturated nor behind, its SLO verdict and latencies None; it is no knee, bounds
no goodput, and a bisection stops at one (until 2026-11-28 its 0 answers read as behind).
Every point's result is written as JSON; a PNG shows throughput and latency against load (a
no-data point as a dotted mark, in no line; a point without answers in no latency line).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadtest import session
from loadtest.sweep_plot import plot
from loadtest.verdict import (
    answered_rate,
    baseline_ttft,
    behind,
    meets,
    no_data,
    parse_slo,
    saturated,
    sent_rate,
)

MAX_RUNGS = 100  # points of --point-duration each (60 s by default: 100 minutes at most)


def rungs(a: argparse.Namespace) -> int:
    """How many rates --start-rate x --factor^k up to --max-rate makes, counted, not built."""
    if a.max_rate < a.start_rate:
        return 0
    return math.floor(math.log(a.max_rate / a.start_rate) / math.log(a.factor) + 1e-9) + 1


def too_many_rungs(a: argparse.Namespace) -> str:
    return (f"--factor {a.factor:.10g} from --start-rate {a.start_rate:.10g} to --max-rate "
            f"{a.max_rate:.10g} makes {rungs(a):,} rungs (at most {MAX_RUNGS}, each a point of "
            "--point-duration): raise --factor or --start-rate, lower --max-rate, or list "
            "--rates")


def ladder(a: argparse.Namespace) -> list[float]:
    if a.rates:
        return [float(r) for r in a.rates.split(",")]
    if a.factor <= 1 or a.start_rate <= 0:
        raise ValueError("--factor must be > 1 and --start-rate > 0")
    if rungs(a) > MAX_RUNGS:  # a factor just above 1 (1.0000001: 69 million rates) hung
        raise ValueError(too_many_rungs(a))
    rates, r = [], a.start_rate
    while r <= a.max_rate:
        rates.append(r)
        r *= a.factor
    return rates


def levels(spec: str) -> list[int]:
    """--concurrencies (sweep_concurrency.py): increasing integers >= 1."""
    try:
        out = [int(c) for c in spec.split(",") if c]
    except ValueError:
        out = []
    if not out or any(c < 1 for c in out) or out != sorted(set(out)):
        raise ValueError("--concurrencies: increasing integers >= 1, like 1,2,4,8")
    return out


def check_args(a: argparse.Namespace) -> list[str]:
    errors = []
    if getattr(a, "concurrencies", None):
        try:
            levels(a.concurrencies)
        except ValueError as e:
            errors.append(str(e))
        if a.workers not in ("1", "auto"):  # each point a closed loop for a duration
            errors.append("--concurrencies runs closed loops, which --workers N cannot shard "
                          "(no schedule to deal out): --workers 1 or auto")
    if not (a.factor > 1 and 0 < a.start_rate < math.inf and a.max_rate < math.inf):
        # (an infinite --max-rate or --factor: a ladder without end)
        return ["--factor must be > 1, --start-rate > 0, --max-rate finite"]
    if not a.rates and rungs(a) > MAX_RUNGS:
        return [too_many_rungs(a)]
    try:
        rates = ladder(a)
        if not rates or any(not 0 < r < math.inf for r in rates):
            errors.append("--rates / --start-rate: the ladder needs finite rates > 0 (a "
                          "closed loop: --concurrencies)")
        elif rates != sorted(set(rates)):  # the first point is the lightest one
            errors.append("--rates: increasing rates, like 1,2,4")
    except ValueError:
        errors.append(f"--rates {a.rates!r}: expected numbers like 1,2,4")
    if a.point_duration <= 0 or a.bisect_steps < 0:
        errors.append("--point-duration must be > 0 and --bisect-steps >= 0")
    try:
        parse_slo(a.slo)
    except ValueError as e:
        errors.append(str(e))
    if a.repeats != 1 or a.num_prompts is not None or a.duration is not None:
        errors.append("sweep measures each point once for --point-duration seconds: "
                      "--repeats, --num-prompts and --duration do not apply")
    return errors


def point_args(a: argparse.Namespace, rate: float, slo: dict[str, float],
               index: int = 0) -> argparse.Namespace:
    """Point `index` of the sweep: its own seed (--seed + index), so behind a cache no point
    replays the prompts an earlier one left in it."""
    p = copy.copy(a)
    p.request_rate, p.num_prompts, p.repeats = rate, None, 1
    # a drain at least as long as a TTFT SLO: a window arrival still waiting for a client slot
    # when sending stops has waited longer than the SLO (so `unsent` misses only such points)
    ttft_s = max((ms / 1000 for k, ms in slo.items() if k.endswith("_ttft_ms")), default=0.0)
    p.cooldown_seconds = max(a.cooldown_seconds, ttft_s)
    # the window measured is --point-duration; a ramp-up and a drain are sent around it
    p.duration = a.point_duration + a.warmup_seconds + p.cooldown_seconds
    p.seed = a.seed + index
    metrics = set(a.percentile_metrics.split(",")) | {k.split("_")[1] for k in slo}
    p.percentile_metrics = ",".join(sorted(metrics))
    if "99" not in a.metric_percentiles.split(","):
        p.metric_percentiles = a.metric_percentiles + ",99"
    return p


Measure = Callable[[argparse.Namespace], dict[str, Any]]


def knee_line(said: str, knee: float | None, saturated: float | None, tried: str,
              more: str) -> str:
    """What the sweep found: the knee (`said`), none before the first point, or none yet."""
    if saturated is None:
        return f"knee: not reached: no {tried} saturated; {more}"
    if knee is None:
        return "knee: saturated at the first point; start lower"
    return f"knee: {said}"


def save_interrupted(out: Path, summary: dict[str, Any]) -> None:
    """Ctrl-C: the points measured so far, marked, before the sweep stops as interrupted."""
    (out / "sweep.json").write_text(json.dumps({**summary, "interrupted": True}, indent=1))
    print(f"interrupted: {len(summary['points'])} points in {out}/sweep.json", flush=True)


def _measure(p: argparse.Namespace) -> dict[str, Any]:
    out, res = asyncio.run(session.measure_once(p, p.target, session.load_tokenizer(p)))
    if out.interrupted:  # Ctrl-C inside the run: a cut-short point is no point
        raise KeyboardInterrupt
    return res


def sweep(a: argparse.Namespace, measure: Measure = _measure) -> dict[str, Any]:
    slo = parse_slo(a.slo)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    points: list[dict[str, Any]] = []

    def run(rate: float, phase: str) -> dict[str, Any]:
        res = measure(point_args(a, rate, slo, len(points)))
        base = baseline_ttft(points)
        window = float((res.get("windows") or {}).get("steady_s") or a.point_duration)
        sent = sent_rate(res, window)
        empty = no_data(res)
        # no arrival in the window: its latencies are the zeros of no request, no verdict
        latency = ("mean_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "p99_e2el_ms")
        pt = {"offered_rate": rate, "phase": phase, "sent_rate": sent,
              # the window's answered requests per second of it; request_throughput is that
              # only with a ramp-up or drain (else over the run, the last answers' drain too)
              "achieved_rate": res.get("completed", 0) / window,
              "completion_rate": res.get("completion_rate"),
              "answered_rate": answered_rate(res, window) if res.get("completed") else None,
              "no_data": empty,
              "saturated": saturated(res, sent, window, base),
              "behind": behind(res, sent, window),
              "meets_slo": None if empty else meets(res, slo),
              **{k: None if empty else res.get(k) for k in latency},
              **{k: res.get(k) for k in ("output_throughput", "completed", "failed")}}
        points.append(pt)
        (out / f"point-{len(points):02d}-{rate:g}.json").write_text(json.dumps(res, indent=1))
        print(f"  {phase:6} offered {rate:8.2f} req/s  sent {sent:8.2f}  achieved "
              f"{pt['achieved_rate'] or 0:8.2f}  answered {pt['answered_rate'] or 0:8.2f}"
              f"  mean TTFT {pt['mean_ttft_ms'] or 0:8.1f} ms"
              f"{'  SATURATED' if pt['saturated'] else ''}"
              f"{'' if not slo or empty else ('  SLO met' if pt['meets_slo'] else '  SLO missed')}"
              f"{f'  NO DATA (no arrivals in the {window:g} s window)' if empty else ''}",
              flush=True)
        return pt

    try:
        for rate in ladder(a):
            pt = run(rate, "ladder")
            if pt["saturated"] and (not slo or pt["behind"] or not pt["meets_slo"]):
                break
        knee, first_sat = knee_of(points, "offered_rate")
        goodput = _bisect(a, slo, points, run) if slo else None
    except KeyboardInterrupt:
        save_interrupted(out, {"points": points})
        raise
    bounded = bracketed(points, goodput) if slo else None
    summary = {"points": points, "knee_rate": knee, "saturation_rate": first_sat,
               "highest_rate": max((p["offered_rate"] for p in points), default=None),
               "slo": {k: v for k, v in slo.items()}, "goodput_rate": goodput,
               "goodput_bounded": bounded}
    (out / "sweep.json").write_text(json.dumps(summary, indent=1))
    png = plot(points, out / "sweep.png", knee, goodput)
    print(knee_line(f"{knee} req/s (last rate before saturation)", knee, first_sat,
                    f"rate up to {summary['highest_rate']} req/s", "raise --max-rate (or --rates)"),
          flush=True)
    if slo:
        print(f"goodput: highest rate meeting the SLO: {goodput} req/s"
              + ("" if bounded else " (a lower bound: no rate tried missed the SLO; raise "
                 "--max-rate)"), flush=True)
    print(f"wrote {out}/sweep.json, {len(points)} point JSONs and {png.name}", flush=True)
    return summary


def knee_of(points: list[dict[str, Any]], key: str) -> tuple[Any, Any]:
    """(knee, first saturated level) of a ladder's points, levels read at `key`: the knee is
    the highest unsaturated level below the first saturated one (one with data: `no_data`),
    unknown when none saturated."""
    first_sat = next((p[key] for p in points if p["saturated"]), None)
    if first_sat is None:
        return None, None
    return max((p[key] for p in points if not p["saturated"] and not p.get("no_data")
                and p[key] < first_sat), default=None), first_sat


def bracketed(points: list[dict[str, Any]], goodput: float | None,
              key: str = "offered_rate") -> bool:
    """Some level above the goodput missed the SLO (a miss below it bounds nothing; a point
    without data, `meets_slo` None, neither met nor missed it)."""
    return any(p["meets_slo"] is False and (goodput is None or p[key] > goodput)
               for p in points)


def slo_bracket(points: list[dict[str, Any]], key: str) -> tuple[Any, Any]:
    """The highest level (at `key`) that met the SLO and the lowest above it that missed it."""
    lo = max((p[key] for p in points if p["meets_slo"]), default=None)
    hi = min((p[key] for p in points
              if p["meets_slo"] is False and (lo is None or p[key] > lo)), default=None)
    return lo, hi


def _bisect(a: argparse.Namespace, slo: dict[str, float], points: list[dict[str, Any]],
            run: Callable[[float, str], dict[str, Any]]) -> float | None:
    lo, hi = slo_bracket(points, "offered_rate")
    if lo is None or hi is None:
        return None if lo is None else float(lo)
    lo, hi = float(lo), float(hi)
    for _ in range(a.bisect_steps):
        mid = (lo + hi) / 2
        verdict = run(mid, "bisect")["meets_slo"]
        if verdict is None:  # no arrival in its window: no evidence either way; lo stands
            break
        if verdict:
            lo = mid
        else:
            hi = mid
    return lo
