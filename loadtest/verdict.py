"""What one sweep point says: the SLO's metrics, whether a point met it, was behind the offered
rate, saturated or had no data (see `loadtest.sweep` for how the ladder uses them)."""

from __future__ import annotations

import math
from typing import Any

from loadtest.stats import unsent

SLO_KEYS = {"ttft_p99": "p99_ttft_ms", "tpot_p99": "p99_tpot_ms", "itl_p99": "p99_itl_ms",
            "e2el_p99": "p99_e2el_ms", "ttft_mean": "mean_ttft_ms", "tpot_mean": "mean_tpot_ms",
            "e2el_mean": "mean_e2el_ms"}
ACHIEVED_MIN = 0.9  # of the offered rate
TTFT_GROWTH_MAX = 3.0  # mean TTFT against the lightest point's


def parse_slo(spec: str | None) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in (spec or "").split(","):
        if not item:
            continue
        name, _, ms = item.partition(":")
        if name not in SLO_KEYS:
            raise ValueError(f"--slo {item!r}: unknown metric; known: {sorted(SLO_KEYS)}")
        try:
            out[SLO_KEYS[name]] = float(ms)
        except ValueError:
            raise ValueError(f"--slo {item!r}: expected METRIC:MILLISECONDS") from None
        if not 0 < out[SLO_KEYS[name]] < math.inf:
            raise ValueError(f"--slo {item!r}: the milliseconds must be a number > 0")
    return out


def slo_value(res: dict[str, Any], key: str) -> Any:
    """A TTFT or E2EL percentile counts from the scheduled arrival where the result has it (a
    request that waited for a --max-concurrency slot waited in front of the server all the
    same)."""
    for metric in ("_ttft_", "_e2el_"):
        arrival = key.replace(metric, "_arrival" + metric)
        if metric in key and arrival != key and res.get(arrival) is not None:
            return res[arrival]
    return res.get(key)


# share of the window's scheduled arrivals a point may leave unsent (`stats.unsent`): each
# waited through the drain, which `point_args` makes at least as long as a TTFT SLO, so each
# would have missed it (no percentile can include them)
UNSENT_MAX = 0.01


def left_unsent(res: dict[str, Any]) -> bool:
    """More than UNSENT_MAX of the window's scheduled arrivals never sent: a missed point."""
    return unsent(res) > UNSENT_MAX * float(res.get("scheduled_in_window") or 0)


def meets(res: dict[str, Any], slo: dict[str, float]) -> bool:
    """Every request answered, the SLO's percentiles within it (TTFT from arrival where
    measured), and at most 1 % of the scheduled arrivals left unsent."""
    return res.get("completed", 0) > 0 and not res.get("failed") and all(
        (v := slo_value(res, k)) is not None and float(v) <= ms for k, ms in slo.items()
    ) and not left_unsent(res)


def window_arrivals(res: dict[str, Any]) -> int:
    """The arrivals offered to the window: its scheduled ones where the result counts them
    (a capped client may not send them all before the run ends), else those sent."""
    due = res.get("scheduled_in_window")
    return int(res.get("completed", 0) + res.get("failed", 0) if due is None else due)


def no_data(res: dict[str, Any]) -> bool:
    """No arrival fell in the window (a low rate's Poisson draw can leave it empty): nothing
    was offered, so the point says nothing of the server, neither saturation nor the SLO."""
    return window_arrivals(res) == 0


def sent_rate(res: dict[str, Any], window: float) -> float:
    """The rate offered to the window (`window_arrivals`)."""
    return float(window_arrivals(res)) / window


def answered_rate(res: dict[str, Any], window: float) -> float:
    """The window's requests answered per second of the window, at the pace their answers
    kept against their arrivals (`stats.completion_rate` over `stats.arrival_rate`, both
    fitted down the order of arrival, so the answers' lengths and the arrivals' Poisson noise
    cancel). A result without the fit (older, or too few answers): completion_rate, else
    request_throughput."""
    answers, arrivals = res.get("completion_rate"), res.get("arrival_rate")
    if answers is not None and arrivals:
        pace = min(1.0, float(answers) / float(arrivals))
        return float(res.get("completed", 0)) / window * pace
    return float(res["request_throughput"] if answers is None else answers)


def behind(res: dict[str, Any], offered: float, window: float) -> bool:
    """Answered slower than sent (not over the run, whose drain of the last answers is
    latency, not backlog). A window without arrivals is not behind: there was nothing to answer
    (until 2026-11-28, its 0 answers read as behind, and the sweep stopped there)."""
    if no_data(res):
        return False
    return res.get("completed", 0) == 0 or answered_rate(res, window) < ACHIEVED_MIN * offered


def baseline_ttft(points: list[dict[str, Any]]) -> float | None:
    """The mean TTFT later points' growth is judged against: the first point's that answered
    (a point without answers has only the zero of no request, or no data: until 2026-11-28 the
    first point's, whatever it was, so a 0 made every later point 'grown past 3x')."""
    return next((float(p["mean_ttft_ms"]) for p in points
                 if p.get("completed") and p.get("mean_ttft_ms") is not None), None)


def saturated(res: dict[str, Any], offered: float, window: float,
              base_ttft: float | None) -> bool:
    if no_data(res):  # nothing offered: no sign of saturation either way
        return False
    if behind(res, offered, window):
        return True
    ttft = res.get("mean_ttft_ms")
    return base_ttft is not None and ttft is not None and ttft > TTFT_GROWTH_MAX * base_ttft
