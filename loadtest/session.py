"""One benchmark from parsed options: workload, client, scrape, run, stats, report."""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import datetime
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from loadtest import cachestats, ci, pool, report, schedule, stats, workers, workload
from loadtest.client import Client, ClientConfig, Result
from loadtest.metrics_scrape import Scraper, referee
from loadtest.request import WorkloadConfig
from loadtest.runner import RunConfig, RunOutput, run, warm_up
from loadtest.tokens import HFTokenizer, Tokenizer


@dataclass(frozen=True)
class Plan:
    workload: WorkloadConfig
    run: RunConfig
    percentiles: list[float]
    percentile_metrics: list[str]
    goodput: dict[str, float] | None


def plan(a: argparse.Namespace) -> Plan:
    wl = WorkloadConfig(
        name=a.workload, seed=a.seed, input_len=a.input_len,
        output_len=a.sharegpt_output_len if a.workload == "sharegpt" else a.output_len,
        range_ratio=a.range_ratio, ignore_eos=a.ignore_eos, dataset_path=a.dataset_path,
        prefix_len=a.prefix_len, suffix_len=a.suffix_len, num_prefixes=a.num_prefixes,
        cache={"questions": a.cache_questions, "repeat": a.repeat_ratio,
               "paraphrase": a.paraphrase_ratio, "near_miss": a.near_miss_ratio,
               "zipf": a.zipf})
    rc = RunConfig(num_prompts=a.num_prompts, duration=a.duration, request_rate=a.request_rate,
                   burstiness=a.burstiness, max_concurrency=a.max_concurrency,
                   warmup=a.warmup, seed=a.seed, progress=not a.no_progress)
    goodput = {k: float(v) for k, _, v in (g.partition(":") for g in a.goodput or [])}
    return Plan(wl, rc, [float(p) for p in a.metric_percentiles.split(",")],
                a.percentile_metrics.split(","), goodput or None)


def client_config(a: argparse.Namespace, target: str, model: str) -> ClientConfig:
    temperature = a.temperature
    if temperature is None and a.workload in ("cache", "repeat"):
        temperature = 0.0  # reference answers need greedy decoding
    return ClientConfig(
        base_url=target, model=model, endpoint=a.endpoint, stream=not a.no_stream,
        temperature=temperature, timeout=a.timeout,
        headers=dict(h.split(":", 1) for h in a.header),
        extra_body=orjson.loads(a.extra_body) if a.extra_body else {})


def first_model(target: str) -> str:
    try:
        data = httpx.get(target.rstrip("/") + "/v1/models", timeout=10).json()
        return str(data["data"][0]["id"])
    except (httpx.HTTPError, KeyError, IndexError, TypeError, ValueError) as e:
        raise ValueError(f"could not read a model from {target}/v1/models ({e}); "
                         "pass --model") from e


def scrape_urls(a: argparse.Namespace, target: str) -> dict[str, str]:
    if a.no_scrape:
        return {}
    urls = {"target": target.rstrip("/") + "/metrics"}
    if a.backend_url:
        urls["backend"] = a.backend_url.rstrip("/") + "/metrics"
    for i, m in enumerate(a.metrics_url):
        name, _, url = m.rpartition("=") if "=" in m and not m.startswith("http") else ("", "", m)
        urls[name or f"extra{i}"] = url
    return urls


async def measure(a: argparse.Namespace, target: str, tok: Tokenizer | None
                  ) -> tuple[list[RunOutput], dict[str, Any]]:
    """One run, or `--repeats` runs merged (loadtest/ci.py); every run's output, in order.
    After a Ctrl-C during a run, the runs so far (the last one cut short): `"interrupted":
    true` (a Ctrl-C anywhere else raises KeyboardInterrupt out of asyncio.run)."""
    runs: list[dict[str, Any]] = []
    outs: list[RunOutput] = []
    for i in range(a.repeats):
        if a.repeats > 1:
            print(f"-- repeat {i + 1}/{a.repeats} (seed {a.seed + i})", flush=True)
        # each repeat its own sample of the workload (and, behind a cache, no repeat replays
        # the prompts the previous one left in it)
        out, res = await measure_once(_seeded(a, a.seed + i), target, tok)
        runs.append(res)
        outs.append(out)
        if out.interrupted:
            break
    merged = ci.merge(runs) if len(runs) > 1 else runs[0]
    if len(runs) > 1:  # what the merge does not average: over every run's requests
        p = plan(a)
        splits = [(o, steady(a, o)) for o in outs]
        merged.update(pool.distributions([s[0] for _, s in splits], p.percentiles,
                                         a.max_concurrency is not None))
        merged.update(pool.counts(splits, p.percentiles, merged.get("windows")))
        merged["server_metrics"] = pool.server([r.get("server_metrics") or {} for r in runs])
        merged.update(pool.workers(runs))
        merged["referee"] = referee(merged)  # the pooled server means against the client's
        merged.pop("window_completion_rate", None)
        windows = [answer_window(a, o) for o in outs]
        if all(w is not None for w in windows):
            merged["window_completion_rate"] = pool.window_rate(
                [(o, w) for o, w in zip(outs, windows, strict=True) if w is not None])
    if len(runs) > 1 and a.save_detailed:  # every repeat's requests, not the first one's
        for k in stats.detail_lists([]):
            merged[k] = [x for r in runs for x in r[k]]
        merged["detail_repeat"] = [i for i, r in enumerate(runs) for _ in r["ttfts"]]
    if outs[-1].interrupted:
        merged["interrupted"] = True
    return outs, merged


def _seeded(a: argparse.Namespace, seed: int) -> argparse.Namespace:
    p = copy.copy(a)
    p.seed = seed
    return p


async def measure_once(a: argparse.Namespace, target: str, tok: Tokenizer | None
                       ) -> tuple[RunOutput, dict[str, Any]]:
    p = plan(a)
    model = a.model or first_model(target)
    requests = workload.stream(p.workload, tok)
    conc = p.run.max_concurrency
    # a closed loop for a duration has no schedule to deal out: one process, whatever auto says
    closed = p.run.num_prompts is None and math.isinf(p.run.request_rate)
    n = 1
    cfg = client_config(a, target, model)
    client = Client(cfg, conc, tok)
    scraper = Scraper(scrape_urls(a, target))
    rc = dataclasses.replace(p.run, warmup=0)  # warmed up here, before the server is read
    try:
        if p.run.warmup:
            first = next(requests)
            await warm_up(client, p.run.warmup, conc, first.max_tokens)
            requests = itertools.chain([first], requests)
        await scraper.start()
        if closed:  # no schedule: prompts made as it goes, in one process
            if a.workers not in ("1", "auto"):
                raise ValueError(workers.NO_SCHEDULE)
            out = await run(client, requests, rc)
        else:  # prompts made before the clock starts, not on the loop between sends
            reqs, offs = workers.materialise(requests, rc)
            # auto sizes by the answers' own lengths (a dataset's rows carry theirs)
            n = workers.resolve(a.workers, rc.request_rate, conc,
                                workers.mean_output_len(reqs, p.workload.output_len))
            if n > 1:
                out, n = await workers.run_workers(reqs, offs, rc, cfg, a.tokenizer, n)
            else:
                out = await run(client, iter(reqs), rc, when=offs)
        server = await scraper.stop()
    finally:
        await client.aclose()
    res = result_dict(a, target, model, p, out)
    res["client_workers"] = n
    res["server_metrics"] = server
    res["referee"] = referee(res)
    res["selfcheck"]["warnings"] += res["referee"]
    return out, res


def edges(a: argparse.Namespace) -> tuple[float, float]:
    """The ramp-up's and the drain's seconds (--warmup-seconds, --cooldown-seconds)."""
    return getattr(a, "warmup_seconds", 0.0), getattr(a, "cooldown_seconds", 0.0)


def steady(a: argparse.Namespace, out: RunOutput
           ) -> tuple[list[Result], float, dict[str, list[Result]]]:
    """The steady window's requests, its seconds (the throughput denominator) and the ramp-up's
    and drain's requests apart; without either, every request over the run's duration."""
    ramp_s, drain_s = edges(a)
    if not (ramp_s or drain_s):
        return out.results, out.duration, {"ramp": [], "drain": []}
    # the span of sending, not the run (which goes on while the last answers drain)
    sending = a.duration if a.duration is not None else max(
        ((r.scheduled or r.start) - out.t0 for r in out.results), default=0.0)
    return stats.windows(out.results, out.t0, sending, ramp_s, drain_s)


def answer_window(a: argparse.Namespace, out: RunOutput) -> tuple[float, float] | None:
    """[start, end) seconds after t0 of a --duration run's steady window, in which its answers
    are counted (`window_completion_rate`) and its scheduled arrivals; none for a run cut
    short or one of --num-prompts."""
    if a.duration is None or out.interrupted:
        return None
    ramp_s, drain_s = edges(a)
    return ramp_s, max(ramp_s, a.duration - drain_s)


def result_dict(a: argparse.Namespace, target: str, model: str, p: Plan, out: RunOutput
                ) -> dict[str, Any]:
    res: dict[str, Any] = {
        "date": datetime.datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if a.endpoint == "chat" else "openai",
        "backend": "openai-chat" if a.endpoint == "chat" else "openai",
        "label": a.label, "model_id": model, "tokenizer_id": a.tokenizer,
        "num_prompts": a.num_prompts,
        "request_rate": "inf" if math.isinf(a.request_rate) else a.request_rate,
        "burstiness": a.burstiness, "max_concurrency": a.max_concurrency,
        "target": target, "workload": a.workload, "seed": a.seed,
    }
    results, span, apart = steady(a, out)
    ramp_s, drain_s = edges(a)
    if ramp_s or drain_s:
        res["windows"] = {"steady_s": span, "ramp_s": ramp_s, "drain_s": drain_s,
                          "ramp": stats.summarize(apart["ramp"], ramp_s, p.percentiles),
                          "drain": stats.summarize(apart["drain"], drain_s, p.percentiles)}
    res.update(stats.summarize(results, span, p.percentiles, p.goodput))
    window = answer_window(a, out)
    if window is not None:  # answered inside the window
        res["window_completion_rate"] = stats.window_completion_rate(
            out.results, out.t0, *window)
        if not math.isinf(a.request_rate):  # the offered load, sent or not
            res["scheduled_in_window"] = stats.due_in(
                schedule.offsets(a.request_rate, a.burstiness, a.seed, a.num_prompts),
                *window)
    if p.run.max_concurrency:  # the headline's requests: a sweep judges TTFT by these
        res.update(stats.queue_stats(results, p.percentiles))
    # the same window as the headline; every answer is a reference for judging its hits
    res["cache"] = cachestats.cache_summary(results, reference=out.results)
    res["by_cache"] = cachestats.split(results, span, p.percentiles)
    # not "errors": --save-detailed adds vLLM's per-request list under that name; the window's,
    # as "Failed requests" is (the ramp-up's and drain's apart, under "windows")
    res["error_counts"] = stats.error_counts(results)
    if "windows" in res:
        for part in ("ramp", "drain"):
            res["windows"][part]["error_counts"] = stats.error_counts(apart[part])
    res["selfcheck"] = out.selfcheck.summary()
    if a.save_detailed:
        res.update(stats.detail_lists(out.results))
    return res


def load_tokenizer(a: argparse.Namespace) -> Tokenizer | None:
    if not a.tokenizer:
        return None
    try:
        return HFTokenizer(a.tokenizer)
    except (OSError, ValueError) as e:
        raise ValueError(f"--tokenizer {a.tokenizer}: cannot load ({e})") from e


def emit(a: argparse.Namespace, outs: list[RunOutput], res: dict[str, Any], p: Plan) -> None:
    print(report.block(res, p.percentile_metrics, p.percentiles), flush=True)
    for line in ci.lines(res):
        print(line, flush=True)
    for w in res["selfcheck"]["warnings"]:
        print(f"WARNING: {w}", flush=True)
    failed = [r.error for out in outs for r in out.results if not r.success]
    for i, err in enumerate(failed[:5]):
        print(f"Error {i}: {err}", flush=True)
    if a.json:
        report.write_json(a.json, res)
    jsonl = a.jsonl or (str(Path(a.json).with_suffix(".requests.jsonl")) if a.json else None)
    if jsonl:
        report.write_jsonl(jsonl, outs)


def run_and_report(a: argparse.Namespace) -> dict[str, Any]:
    tok = load_tokenizer(a)
    outs, res = asyncio.run(measure(a, a.target, tok))
    if res.get("interrupted"):
        print("interrupted: the requests finished so far", flush=True)
    emit(a, outs, res, plan(a))
    if res.get("interrupted"):
        raise KeyboardInterrupt  # reported and saved; the CLI exits 130
    return res
