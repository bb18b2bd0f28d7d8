"""`loadtest sweep --concurrencies 1,2,4,...`: a closed-loop ladder. Each point keeps C requests
in flight for --point-duration s; throughput grows with C until the server is full, after
which more concurrency only queues. A point is saturated when doubling (or whatever step the
ladder takes) bought less than MIN_GAIN more completed requests per second than the previous
point, or its mean TTFT grew past 3x the lightest answered point's (`baseline_ttft`); the
ladder stops there and the knee is the last concurrency before it. Completed requests per
second are counted inside the window the loop held C requests in flight
(`window_completion_rate`), not over the whole run, whose drain after the last send holds
fewer and fewer. With --slo, it goes on past saturation
while the SLO holds, and the highest concurrency that met it is the goodput point (integers:
bisected between the last good and the first bad point; a lower bound, "goodput_bounded":
false, when no level tried missed it).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from loadtest.sweep import (
    Measure,
    _measure,
    bracketed,
    knee_line,
    knee_of,
    levels,
    point_args,
    save_interrupted,
    slo_bracket,
)
from loadtest.sweep_plot import plot
from loadtest.verdict import TTFT_GROWTH_MAX, baseline_ttft, meets, parse_slo

MIN_GAIN = 1.10  # throughput of a point against the previous one's


def held_rate(res: dict[str, Any]) -> float:
    """Completed requests per second while the loop held its concurrency: inside the measured
    window. Not request_throughput (until 2026-11-28), which runs on through the drain after
    the last send: with long answers of varied lengths the drain is long and grows with C, and
    a level that still gained read as gaining less than MIN_GAIN (simulated: 0.93x over the
    run, 1.21x in the window). Nor completion_rate, the rate sweep's: in a closed loop the
    requests sent last are the drain's, and its fit down the order of sending runs through it."""
    rate = res.get("window_completion_rate")
    if rate is None:  # a result without a window (not a --duration run)
        rate = res.get("request_throughput")
    return float(rate or 0.0)


def sweep_concurrency(a: argparse.Namespace, measure: Measure = _measure) -> dict[str, Any]:
    slo = parse_slo(a.slo)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    points: list[dict[str, Any]] = []

    def run(conc: int, phase: str) -> dict[str, Any]:
        p = point_args(a, math.inf, slo)
        p.max_concurrency = conc
        res = measure(p)
        prev = max((q for q in points if q["concurrency"] < conc),
                   key=lambda q: q["concurrency"], default=None)
        base = baseline_ttft(points)
        achieved = held_rate(res)
        ttft = res.get("mean_ttft_ms")
        sat = (res.get("completed", 0) == 0
               or (prev is not None and achieved < MIN_GAIN * prev["achieved_rate"])
               or (base is not None and ttft is not None and ttft > TTFT_GROWTH_MAX * base))
        pt = {"concurrency": conc, "offered_rate": conc, "phase": phase,
              "achieved_rate": achieved, "mean_ttft_ms": ttft, "saturated": sat,
              "meets_slo": meets(res, slo),
              **{k: res.get(k) for k in ("request_throughput", "p99_ttft_ms", "p99_tpot_ms",
                                         "p99_e2el_ms", "output_throughput", "completed",
                                         "failed")}}
        points.append(pt)
        (out / f"point-{len(points):02d}-c{conc}.json").write_text(json.dumps(res, indent=1))
        print(f"  {phase:6} concurrency {conc:5d}  achieved {achieved:8.2f} req/s  mean TTFT "
              f"{ttft or 0:8.1f} ms{'  SATURATED' if sat else ''}"
              f"{'' if not slo else ('  SLO met' if pt['meets_slo'] else '  SLO missed')}",
              flush=True)
        return pt

    try:
        for conc in levels(a.concurrencies):
            pt = run(conc, "ladder")
            # with an SLO, queueing past the knee that the SLO allows is still goodput
            if pt["saturated"] and (not slo or not pt["meets_slo"]):
                break
        knee, sat = knee_of(points, "concurrency")
        goodput = _bisect(slo, points, run) if slo else None
    except KeyboardInterrupt:
        save_interrupted(out, {"mode": "concurrency", "points": points})
        raise
    bounded = bracketed(points, goodput, "concurrency") if slo else None
    summary = {"mode": "concurrency", "points": points, "knee_concurrency": knee,
               "saturation_concurrency": sat,
               "slo": slo, "goodput_concurrency": goodput, "goodput_bounded": bounded}
    (out / "sweep.json").write_text(json.dumps(summary, indent=1))
    png = plot(points, out / "sweep.png", knee, goodput, "concurrency (requests in flight)")
    print(knee_line(f"concurrency {knee}", knee, sat,
                    f"level up to {max(p['concurrency'] for p in points)}",
                    "add higher --concurrencies"), flush=True)
    if slo:
        print(f"goodput: highest concurrency meeting the SLO: {goodput}"
              + ("" if bounded else " (a lower bound: no level tried missed the SLO; add "
                 "higher --concurrencies)"), flush=True)
    print(f"wrote {out}/sweep.json, {len(points)} point JSONs and {png.name}", flush=True)
    return summary


def _bisect(slo: dict[str, float], points: list[dict[str, Any]], run: Any) -> int | None:
    lo, hi = slo_bracket(points, "concurrency")
    if lo is None or hi is None:
        return None if lo is None else int(lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if run(mid, "bisect")["meets_slo"]:
            lo = mid
        else:
            hi = mid
    return int(lo)
