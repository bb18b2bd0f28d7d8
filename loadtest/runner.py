"""Drive a workload against a target: warm-up, schedule, concurrency cap, progress, self-check."""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from loadtest import schedule
from loadtest.client import Client, Result
from loadtest.request import Request
from loadtest.selfcheck import LoopLagMonitor, SelfCheck
from loadtest.workload import warmup_requests


@dataclass(frozen=True)
class RunConfig:
    num_prompts: int | None = 100
    duration: float | None = None
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    warmup: int = 0
    seed: int = 0
    progress: bool = True


@dataclass
class RunOutput:
    results: list[Result]
    duration: float
    t0: float
    selfcheck: SelfCheck = field(default_factory=SelfCheck)
    interrupted: bool = False  # Ctrl-C: the requests finished by then, the rest cancelled


def progress_bar(cfg: RunConfig) -> Progress:
    return Progress(TextColumn("[bold]loadtest"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True),
                    disable=not cfg.progress, transient=True)


async def warm_up(client: Client, n: int, concurrency: int | None, max_tokens: int) -> None:
    sem = asyncio.Semaphore(concurrency or n or 1)

    async def one(r: Request) -> None:
        async with sem:
            await client.send(r)

    await asyncio.gather(*(one(r) for r in warmup_requests(n, max_tokens)))


async def run(client: Client, requests: Iterator[Request], cfg: RunConfig,
              when: Iterable[float] | None = None, start_at: float | None = None,
              on_done: Callable[[], None] | None = None) -> RunOutput:
    """One process's run. A worker of a sharded run (workers.py) passes its share of the
    schedule (`when`), the common start (`start_at`, a perf_counter time: CLOCK_MONOTONIC, the
    same in every process) and `on_done` for the parent's progress bar."""
    if cfg.num_prompts is None and cfg.duration is None:
        raise ValueError("give --num-prompts or --duration")
    if cfg.warmup:
        first = next(requests)
        requests = itertools.chain([first], requests)
        await warm_up(client, cfg.warmup, cfg.max_concurrency, first.max_tokens)
    sem = asyncio.Semaphore(cfg.max_concurrency) if cfg.max_concurrency else None
    check = SelfCheck(closed_loop=math.isinf(cfg.request_rate))
    monitor = LoopLagMonitor()
    monitor.start()
    results: list[Result] = []
    tasks: set[asyncio.Task[None]] = set()
    reqs = itertools.islice(requests, cfg.num_prompts) if cfg.num_prompts else requests
    if when is None:
        when = schedule.offsets(cfg.request_rate, cfg.burstiness, cfg.seed, cfg.num_prompts)

    with progress_bar(cfg) as bar:
        task_id = bar.add_task("run", total=cfg.num_prompts)

        async def one(req: Request, scheduled: float, slot: float, late: float) -> None:
            try:
                res = await client.send(req)
                check.send_lags.append(res.start - slot + late)
                if check.closed_loop:  # no schedule: "due" when a slot was free, no queue
                    scheduled = slot
                res.scheduled, res.queue_time = scheduled, max(0.0, slot - scheduled)
                results.append(res)
            finally:
                if sem is not None:
                    sem.release()
                bar.advance(task_id)
                if on_done is not None:
                    on_done()

        if start_at is not None:
            await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        cpu0 = time.process_time()
        t0 = time.perf_counter() if start_at is None else start_at
        free = t0  # when the dispatcher last got a slot: lateness before that is queueing
        interrupted = False
        try:
            for req, offset in zip(reqs, when, strict=False):
                if cfg.duration is not None and offset >= cfg.duration:
                    break
                target = t0 + offset
                delay = target - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                before = time.perf_counter()
                if sem is not None:
                    await sem.acquire()
                slot = time.perf_counter()
                if cfg.duration is not None and slot - t0 >= cfg.duration:
                    if sem is not None:
                        sem.release()
                    break
                late = max(0.0, before - max(target, free))
                free = slot
                task = asyncio.create_task(one(req, target, slot, late))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            while tasks:
                await asyncio.gather(*list(tasks))
        except asyncio.CancelledError:  # Ctrl-C (asyncio.run cancels us): keep what finished
            interrupted = True
            for t in list(tasks):
                t.cancel()
            await asyncio.gather(*list(tasks), return_exceptions=True)
        elapsed = time.perf_counter() - t0
        check.cpu_s, check.wall_s = time.process_time() - cpu0, elapsed
        # a --duration run's arrivals were drawn over the whole window: it lasts that long
        # even when its last arrival came early and was answered before the window's end
        duration = elapsed if cfg.duration is None or interrupted else max(elapsed,
                                                                           cfg.duration)
    await monitor.stop()
    check.loop_lags = monitor.lags
    results.sort(key=lambda r: r.index)
    return RunOutput(results, duration, t0, check, interrupted)
