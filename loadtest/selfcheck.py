"""Is the client the bottleneck? Send lag behind schedule, event-loop stalls, client CPU use.

Two failure modes, both measured: crying wolf and missing a stall. Send lag is judged only
against a schedule (a finite --request-rate): in a closed loop (no rate, a concurrency limit)
a request is sent when a slot frees, so there is no schedule to lag. Event-loop lag is sampled
every 5 ms; a percentile hides one long stall among thousands of samples, so every wake-up
later than STALL_S counts as a stall and is reported with the worst one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SEND_LAG_WARN_S = 0.010
LOOP_LAG_WARN_S = 0.020
STALL_S = 0.100  # an event-loop wake-up this late is a stall: timings around it are inflated
CPU_WARN = 0.90


class LoopLagMonitor:
    """Sleeps `interval` over and over; how late each wake-up is = how busy the loop is."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - t - self.interval))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@dataclass
class SelfCheck:
    send_lags: list[float] = field(default_factory=list)
    loop_lags: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    process_utils: list[float] = field(default_factory=list)  # --workers: each process's CPU
    wall_s: float = 0.0
    closed_loop: bool = False   # no request rate: no schedule to lag, send lag not judged

    def summary(self) -> dict[str, Any]:
        def pct(xs: list[float], p: float) -> float:
            return float(np.percentile(xs, p)) * 1000 if xs else 0.0

        d: dict[str, Any] = {
            "send_lag_p50_ms": pct(self.send_lags, 50),
            "send_lag_p99_ms": pct(self.send_lags, 99),
            "send_lag_max_ms": max(self.send_lags, default=0.0) * 1000,
            "loop_lag_p99_ms": pct(self.loop_lags, 99),
            "loop_lag_max_ms": max(self.loop_lags, default=0.0) * 1000,
            "loop_stalls": sum(lag >= STALL_S for lag in self.loop_lags),
            # the busiest client process (one core each): what says whether a client limits
            "client_cpu_util": max(self.process_utils) if self.process_utils else (
                self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0),
            "client_processes": max(1, len(self.process_utils)),
            "client_cpu_total": self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0,
        }
        d["warnings"] = self.warnings(d, self.closed_loop)
        return d

    @staticmethod
    def warnings(d: dict[str, Any], closed_loop: bool = False) -> list[str]:
        w = []
        if not closed_loop and d["send_lag_p99_ms"] > SEND_LAG_WARN_S * 1000:
            w.append(f"client sends lag the schedule (p99 {d['send_lag_p99_ms']:.1f} ms): "
                     "the load tester, not the server, may be limiting the request rate")
        if d["loop_lag_p99_ms"] > LOOP_LAG_WARN_S * 1000:
            why = ("lower the rate/concurrency or run more clients" if d["client_cpu_util"] > 0.5
                   else f"the client used only {d['client_cpu_util']:.0%} CPU, so other "
                   "processes on this machine are starving it")
            w.append(f"event-loop lag p99 {d['loop_lag_p99_ms']:.1f} ms: timings include "
                     f"client-side delay; {why}")
        if d.get("loop_stalls", 0):
            w.append(f"{d['loop_stalls']} event-loop stall(s) over {STALL_S * 1000:.0f} ms "
                     f"(worst {d['loop_lag_max_ms']:.0f} ms): requests in flight then have "
                     "inflated timings")
        if d["client_cpu_util"] > CPU_WARN:
            w.append(f"client process used {d['client_cpu_util']:.0%} of one CPU: "
                     "it is probably the bottleneck")
        return w


def worst(checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """--repeats: every run's self-check (`SelfCheck.summary`) as one. Each figure is the worst
    (the highest: lags, stalls, CPU, processes) of any run's, which may be different runs'
    (the send lag of one, the CPU of another); "over" says so, each run's own figures are kept
    under "runs", and each warning names its run. Until 2026-11-28 the merged result carried
    the first run's figures alone, so a client that limited run 2 read as idle beside run 2's
    warning."""
    keys = dict.fromkeys(k for c in checks for k in c if k != "warnings")
    out: dict[str, Any] = {
        k: max(c[k] for c in checks) for k in keys
        if all(isinstance(c.get(k), int | float) for c in checks)}
    out["warnings"] = [f"run {i}: {w}" for i, c in enumerate(checks, 1)
                       for w in c.get("warnings", [])]
    out["over"] = f"worst of {len(checks)} runs"
    out["runs"] = list(checks)
    return out
