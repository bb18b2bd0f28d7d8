"""`--workers N`: one schedule, sharded over N client processes, one merged result.

At ~10k streamed tokens/s one Python process is part of what it measures (its event loop
delays the chunks it timestamps). The parent draws the workload and the arrival times once,
deals them out round-robin (request i goes to worker i mod N, keeping its own send time), and
starts N spawned processes, each with its own event loop and connection pool. They report
ready, then all start at one instant: a time.perf_counter() value, which on Linux is
CLOCK_MONOTONIC, the same clock in every process. Each sends its share at the scheduled
absolute times; the parent merges the per-request records, the send and loop lags and the CPU
time into one RunOutput, the same shape as a one-process run. A --max-concurrency cap is split
between the workers (each enforces its share: no cross-process semaphore). Ctrl-C is the
parent's: workers ignore SIGINT, the parent stops each with one SIGTERM, each keeps the
requests finished by then (as a one-process run does) and the merged result is `interrupted`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from loadtest import schedule
from loadtest.client import Client, ClientConfig
from loadtest.request import Request
from loadtest.runner import RunConfig, RunOutput, progress_bar, run
from loadtest.selfcheck import SelfCheck
from loadtest.tokens import HFTokenizer

EVENTS_PER_WORKER = 6000.0  # streamed chunks/s one client process keeps up with cleanly
NO_SCHEDULE = ("--workers > 1 with --duration needs a finite --request-rate "
               "(a closed-loop duration run has no schedule to shard)")


@dataclass(frozen=True)
class Shard:
    index: int
    requests: list[Request]
    offsets: list[float]
    run: RunConfig
    client: ClientConfig
    tokenizer: str | None


def mean_output_len(requests: list[Request], default: int) -> float:
    """The answers' mean length (max_tokens), what auto counts chunks by: a dataset's rows
    carry their own, which --output-len does not say."""
    return sum(r.max_tokens for r in requests) / len(requests) if requests else float(default)


def resolve(spec: str, rate: float, concurrency: int | None, output_len: float,
            cores: int | None = None) -> int:
    """`auto`: enough processes for the expected chunk rate (a finite rate times the output
    length; a closed loop: ~100 chunks/s per slot), at most half the cores; else the number."""
    if spec != "auto":
        return int(spec)
    events = rate * output_len if math.isfinite(rate) else (concurrency or 1) * 100.0
    most = max(1, (cores or os.cpu_count() or 2) // 2)
    return max(1, min(most, math.ceil(events / EVENTS_PER_WORKER)))


def shards(requests: list[Request], offsets: list[float], cfg: RunConfig, client: ClientConfig,
           tokenizer: str | None, n: int) -> list[Shard]:
    """Round-robin deal of the schedule; the concurrency cap split as evenly as it goes."""
    cap = cfg.max_concurrency
    if cap is not None:
        n = min(n, cap)
    n = max(1, min(n, len(requests)))
    out = []
    for k in range(n):
        share = None if cap is None else cap // n + (1 if k < cap % n else 0)
        reqs, offs = requests[k::n], offsets[k::n]
        out.append(Shard(k, reqs, offs, replace(cfg, num_prompts=len(reqs), max_concurrency=share,
                                                warmup=0, progress=False), client, tokenizer))
    return out


def materialise(requests: Any, cfg: RunConfig) -> tuple[list[Request], list[float]]:
    """The whole schedule up front: --num-prompts arrivals, or those before --duration."""
    if cfg.num_prompts is None and math.isinf(cfg.request_rate):
        raise ValueError(NO_SCHEDULE)
    reqs: list[Request] = []
    offs: list[float] = []
    for req, off in zip(requests, schedule.offsets(cfg.request_rate, cfg.burstiness, cfg.seed,
                                                   cfg.num_prompts), strict=False):
        if cfg.duration is not None and off >= cfg.duration:
            break
        reqs.append(req)
        offs.append(off)
    return reqs, offs


class _Stop:
    """The parent's SIGTERM (its Ctrl-C), whenever it comes: the run is cancelled once, and
    keeps what finished. A signal handler of our own, not the loop's (which the loop's close
    sets back to the default, killing a worker that was about to report)."""

    def __init__(self) -> None:
        self.stopped = False
        self._task: asyncio.Task[RunOutput] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelled = False

    def __call__(self, signum: int, frame: object) -> None:
        self.stopped = True
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._cancel)

    def watch(self, task: asyncio.Task[RunOutput]) -> None:
        self._task = task
        self._loop = asyncio.get_running_loop()
        if self.stopped:
            self._loop.call_soon(self._cancel)

    def _cancel(self) -> None:  # on the loop, so once: a second cancel would cut run()'s cleanup
        if self._task is not None and not self._cancelled:
            self._cancelled = True
            self._task.cancel()


def _worker(shard: Shard, events: mp.Queue[Any], go: Event, start: Synchronized[float]) -> None:
    # a terminal's Ctrl-C reaches every process of the group: the parent's to handle, which
    # stops each worker once (SIGTERM), so a second signal cannot cut a worker's last report
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    try:
        out = asyncio.run(_work(shard, events, go, start, stop))
        events.put(("result", shard.index, out))
    except BaseException:  # report every failure to the parent, which raises it
        events.put(("error", shard.index, traceback.format_exc()))


async def _work(shard: Shard, events: mp.Queue[Any], go: Event, start: Synchronized[float],
                stop: _Stop) -> RunOutput:
    tok = HFTokenizer(shard.tokenizer) if shard.tokenizer else None
    client = Client(shard.client, shard.run.max_concurrency, tok)
    try:
        events.put(("ready", shard.index, None))
        await asyncio.to_thread(go.wait)
        if not stop.stopped:
            task = asyncio.ensure_future(run(
                client, iter(shard.requests), shard.run, when=shard.offsets,
                start_at=start.value, on_done=lambda: events.put(("done", 1, None))))
            stop.watch(task)
            try:
                return await task
            except asyncio.CancelledError:  # stopped before it had started: nothing kept
                pass
        return RunOutput([], 0.0, start.value, interrupted=True)
    finally:
        await client.aclose()


def _next(events: mp.Queue[Any]) -> tuple[str, int, Any] | None:
    try:
        msg: tuple[str, int, Any] = events.get(timeout=0.5)
        return msg
    except queue.Empty:
        return None


def merge(outputs: list[RunOutput], t0: float, closed_loop: bool) -> RunOutput:
    results = sorted((r for o in outputs for r in o.results), key=lambda r: r.index)
    end = max((o.t0 + o.duration for o in outputs), default=t0)
    check = SelfCheck(closed_loop=closed_loop)
    for o in outputs:
        check.send_lags += o.selfcheck.send_lags
        check.loop_lags += o.selfcheck.loop_lags
        check.cpu_s += o.selfcheck.cpu_s
        wall = o.selfcheck.wall_s
        check.process_utils.append(o.selfcheck.cpu_s / wall if wall > 0 else 0.0)
    check.wall_s = end - t0
    return RunOutput(results, end - t0, t0, check, any(o.interrupted for o in outputs))


async def run_sharded(parts: list[Shard], cfg: RunConfig, lead_s: float = 0.05) -> RunOutput:
    ctx = mp.get_context("spawn")
    events: mp.Queue[Any] = ctx.Queue()
    go = ctx.Event()
    start = ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_worker, args=(s, events, go, start), daemon=True)
             for s in parts]
    for p in procs:
        p.start()
    outputs: dict[int, RunOutput] = {}
    ready = 0
    interrupted = False
    pending: asyncio.Future[tuple[str, int, Any] | None] | None = None
    try:
        with progress_bar(cfg) as bar:
            task = bar.add_task("run", total=sum(len(s.requests) for s in parts))
            while len(outputs) < len(procs):
                if pending is None:
                    pending = asyncio.ensure_future(asyncio.to_thread(_next, events))
                try:  # shielded: a message read when Ctrl-C comes is still read after it
                    msg = await asyncio.shield(pending)
                except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels us)
                    if interrupted or not go.is_set():
                        raise  # nothing sent yet, or a second Ctrl-C: give up
                    interrupted = True  # each worker keeps what finished and reports it
                    for p in procs:
                        if p.pid is not None and p.is_alive():
                            with contextlib.suppress(ProcessLookupError):
                                os.kill(p.pid, signal.SIGTERM)
                    continue
                pending = None
                if msg is None:
                    dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                    if dead:
                        raise RuntimeError(f"a load-test worker died (exit codes {dead})")
                    continue
                kind, index, payload = msg
                if kind == "ready":
                    ready += 1
                    if ready == len(procs):
                        start.value = time.perf_counter() + lead_s
                        go.set()
                elif kind == "done":
                    bar.advance(task, index)
                elif kind == "result":
                    outputs[index] = payload
                else:
                    raise RuntimeError(f"load-test worker {index} failed:\n{payload}")
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    out = merge(list(outputs.values()), start.value, math.isinf(cfg.request_rate))
    out.interrupted |= interrupted
    return out


async def run_workers(reqs: list[Request], offs: list[float], cfg: RunConfig,
                      client: ClientConfig, tokenizer: str | None, n: int
                      ) -> tuple[RunOutput, int]:
    """The sharded run of a materialised schedule and how many processes it used (fewer than
    asked when there are fewer requests or concurrency slots than processes)."""
    parts = shards(reqs, offs, cfg, client, tokenizer, n)
    return await run_sharded(parts, cfg), len(parts)
