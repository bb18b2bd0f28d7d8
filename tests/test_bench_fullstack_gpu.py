"""bench/fullstack_gpu.py's report: goodput per target, the ratio, the cache at the goodput
point."""

import argparse
import json

from bench.fullstack_report import report


def write(tmp_path, ratio, target, goodput, hit_share=None, bounded=True, profile=None,
          spec=None):
    """A finished sweep: goodput / 1.5 and goodput met the SLO, goodput x 1.5 missed it (only
    when `bounded`; None: an old sweep.json without the flag)."""
    folder = tmp_path / (f"r{ratio}-{target}" + (f"-{profile}" if profile else ""))
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps(
        {"goodput_rate": goodput, "knee_rate": goodput * 1.5, "saturation_rate": goodput * 2.25,
         "points": [{"meets_slo": bounded is None}] if bounded is None else [],
         **({} if bounded is None else {"goodput_bounded": bounded})}))
    rates = (goodput / 1.5, goodput) + ((goodput * 1.5,) if bounded else ())
    for i, rate in enumerate(rates):
        cache = {} if hit_share is None else {"hit_share": hit_share + i / 100,
                                              "wrong_cached_answers": 0}
        server = {} if spec is None else {"server_metrics": {"backend": {"summary": {
            "Spec-decode acceptance rate (%)": spec[0] + i,
            "Spec-decode acceptance length": spec[1]}}}}
        (folder / f"point-{i + 1:02d}-{rate:g}.json").write_text(json.dumps(
            {"request_rate": rate, "cache": cache, **measured(rate, rate <= goodput), **server}))


def measured(rate, met, queue_p99=0.0, answered=None):
    """A point's numbers: 30 s window after 5 s, the scheduled arrivals, TTFT p99 in or out."""
    return {"request_rate": rate, "completed": int(rate * 30), "failed": 0,
            "windows": {"steady_s": 30.0, "ramp_s": 5.0},
            "scheduled_in_window": int(rate * 30), "completion_rate": answered or rate,
            "p99_ttft_ms": 100.0 if met else 5000.0, "p99_tpot_ms": 10.0,
            "p99_client_queue_time_ms": queue_p99}


def test_goodput_ratio_and_the_hit_rate_at_the_goodput_point(tmp_path):
    write(tmp_path, "0.3", "direct", 20.0)
    write(tmp_path, "0.3", "fullstack", 27.0, hit_share=0.29)
    write(tmp_path, "0.6", "direct", 18.0)  # its full-stack sweep never finished
    a = argparse.Namespace(results=tmp_path, slo="ttft_p99:1000", point_s=30.0)
    text = report(a)
    assert "| 0.3 | fullstack | baseline | 27.0 | – | 40.5 | 60.75 | 0.30 | 0 |" in text
    assert "| 0.3 | 27.0 (baseline) | 20.0 (baseline) | **1.35×** |" in text
    assert "| 0.6 | direct | baseline | 18.0 |" in text and "| 0.6 | 18.0" not in text
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [(r["ratio"], r["goodput_ratio"], r["goodput_ratio_is"]) for r in summary["ratios"]] \
        == [("0.3", 1.35, "exact")]


def test_a_goodput_no_missed_rate_bounds_makes_the_ratio_a_bound(tmp_path):
    write(tmp_path, "0.3", "direct", 27.0, bounded=None)  # an old sweep: all points met the SLO
    write(tmp_path, "0.3", "fullstack", 50.0, hit_share=0.29)
    write(tmp_path, "0.6", "direct", 37.0)
    write(tmp_path, "0.6", "fullstack", 60.0, hit_share=0.59, bounded=False)
    text = report(argparse.Namespace(results=tmp_path, slo="ttft_p99:1000", point_s=30.0))
    assert "| 0.3 | direct | baseline | ≥ 27.0 |" in text and "**≤ 1.85×**" in text
    assert "| 0.6 | fullstack | baseline | ≥ 60.0 |" in text and "**≥ 1.62×**" in text


def test_profiles_make_a_two_by_two_and_every_full_stack_is_set_against_every_alone(tmp_path):
    # round 1: alone on GPU 0 (baseline), full stack on GPU 1 (tuned); round 2 swapped
    write(tmp_path, "0.6", "direct", 36.0, profile="baseline")
    write(tmp_path, "0.6", "fullstack", 120.0, hit_share=0.6, profile="tuned")
    write(tmp_path, "0.6", "direct", 45.0, profile="tuned", spec=(80.0, 3.4))
    write(tmp_path, "0.6", "fullstack", 90.0, hit_share=0.6, bounded=False, profile="baseline")
    text = report(argparse.Namespace(results=tmp_path, slo="ttft_p99:1000", point_s=30.0))
    # the acceptance beside the spec run, at its goodput point (the second point: 80 + 1)
    assert "| 0.6 | direct | tuned | 81.0 % | 3.40 |" in text
    assert "| 0.6 | direct | baseline | 0.0 %" not in text
    assert "| 0.6 | direct | tuned | 45.0 |" in text
    assert "| 0.6 | 120.0 (tuned) | 36.0 (baseline) | **3.33×** |" in text
    assert "| 0.6 | 120.0 (tuned) | 45.0 (tuned) | **2.67×** |" in text
    assert "| 0.6 | ≥ 90.0 (baseline) | 36.0 (baseline) | **≥ 2.50×** |" in text
    ratios = json.loads((tmp_path / "summary.json").read_text())["ratios"]
    assert len(ratios) == 4 and {r["fullstack_profile"] for r in ratios} == {"baseline", "tuned"}


def test_a_repeated_sweep_gets_its_own_folder_and_row(tmp_path):
    from bench.fullstack_gpu import name

    (tmp_path / "r0.6-direct-baseline").mkdir()
    assert name(tmp_path, 0.6, "direct", "baseline", True) == "r0.6-direct-baseline.2"
    assert name(tmp_path, 0.6, "fullstack", "baseline", True) == "r0.6-fullstack-baseline"
    assert name(tmp_path, 0.6, "direct", "baseline", False) == "r0.6-direct"
    (tmp_path / "r0.6-direct-baseline").rmdir()
    write(tmp_path, "0.6", "direct", 36.0, profile="baseline")
    write(tmp_path, "0.6", "direct", 40.0, profile="baseline.2")
    write(tmp_path, "0.6", "fullstack", 120.0, hit_share=0.6, profile="prefix-caching")
    text = report(argparse.Namespace(results=tmp_path, slo="ttft_p99:1000", point_s=30.0))
    assert "| 0.6 | direct | baseline #2 | 40.0 |" in text
    assert "| 0.6 | 120.0 (prefix-caching) | 36.0 (baseline) | **3.33×** |" in text
    assert "| 0.6 | 120.0 (prefix-caching) | 40.0 (baseline #2) | **3.00×** |" in text


def test_a_sweep_cut_before_its_summary_is_read_from_its_points(tmp_path):
    write(tmp_path, "0.6", "direct", 40.0, profile="baseline")
    cut = tmp_path / "r0.6-fullstack-tuned.2"
    cut.mkdir()
    for i, (rate, ttft, failed) in enumerate([(60.0, 200.0, 0), (90.0, 900.0, 0),
                                              (135.0, 4000.0, 0), (112.5, 800.0, 2)]):
        (cut / f"point-{i + 1:02d}-{rate:g}.json").write_text(json.dumps(
            {"request_rate": rate, "completed": 100, "failed": failed, "p99_ttft_ms": ttft,
             "p99_tpot_ms": 10.0, "cache": {"hit_share": 0.6, "wrong_cached_answers": 0}}))
    (tmp_path / "r0.6-fullstack-other").mkdir()  # nothing in it: no row
    text = report(argparse.Namespace(results=tmp_path, slo="ttft_p99:1000,tpot_p99:50",
                                     point_s=30.0))
    # 112.5 failed two requests: missed; 90 is the highest met, bracketed by 112.5 and 135
    assert "| 0.6 | fullstack | tuned #2 (unfinished) | 90.0 | – | None | None | 0.60 | 0 |" in text
    assert "| 0.6 | 90.0 (tuned #2 (unfinished)) | 40.0 (baseline) | **2.25×** |" in text
    assert "other" not in text


def test_the_sweep_command_is_one_the_load_tester_accepts_with_and_without_a_dataset(
        tmp_path, monkeypatch):
    from bench import fullstack_gpu
    from loadtest.cli import check, parser

    sent = []
    monkeypatch.setattr(fullstack_gpu.subprocess, "run", lambda cmd, **_: sent.append(cmd))
    data = tmp_path / "code_edit.jsonl"
    data.write_text('{"prompt": "x = 1\\n", "output_tokens": 8}\n')
    for dataset in (None, data):
        a = argparse.Namespace(
            served_name="model", model="/m", start_rate=8.0, point_s=30.0, warm_s=5.0,
            slo="ttft_p99:1000,tpot_p99:50", bisect_steps=2, results=tmp_path, dataset=dataset,
            factor=1.25, fullstack_start_rate=12.5)
        fullstack_gpu.sweep(a, 0.6, "direct", "http://x", "http://x", 0, 0, "r0.6-direct")
        ap = parser()
        args = ap.parse_args(sent[-1][3:])
        check(ap, args)  # exits on a refused combination
        assert args.workload == "repeat" and args.repeat_ratio == 0.6 and args.factor == 1.25
        assert args.start_rate == 8.0
        fullstack_gpu.sweep(a, 0.6, "fullstack", "http://x", "http://x", 0, 0, "r0.6-fullstack")
        assert parser().parse_args(sent[-1][3:]).start_rate == 12.5  # its own first rung
        assert (args.dataset_path, args.endpoint) == (
            (str(data), "completions") if dataset else (None, "chat"))


def test_points_are_judged_by_the_current_rule_even_when_measured_before_it():
    from bench.fullstack_report import judged
    from loadtest import schedule
    from loadtest.stats import due_in

    slo = {"p99_ttft_ms": 1000.0, "p99_tpot_ms": 50.0}
    assert judged(measured(40.0, True), slo) is True
    # a capped client: TTFT from the send is short, most of the schedule's arrivals never sent
    assert judged({**measured(80.0, True), "completed": 45 * 30}, slo) is False
    assert judged({**measured(80.0, True), "completed": 80 * 30 - 20}, slo) is True  # < 1 %
    # measured before scheduled_in_window: recounted from the point's seeded schedule
    old = {**measured(80.0, True, answered=45.0), "seed": 3, "burstiness": 1.0}
    del old["scheduled_in_window"]
    old["completed"] = 45 * 30
    assert due_in(schedule.offsets(80.0, 1.0, 3, None), 5.0, 35.0) > 2000
    assert judged(old, slo) is False
    # before the arrival metric: TTFT from arrival lies between max(ttft, queue) and their sum
    assert judged(measured(40.0, True, queue_p99=2000.0), slo) is False
    assert judged(measured(40.0, True, queue_p99=950.0), slo) is None
    assert judged(measured(40.0, True, queue_p99=5.0), slo) is True
    assert judged({**measured(40.0, True, queue_p99=950.0), "p99_arrival_ttft_ms": 990.0},
                  slo) is True
    assert judged({**measured(40.0, True), "failed": 1}, slo) is False


def test_the_plot_leaves_points_without_answers_out_of_its_lines(tmp_path, monkeypatch):
    """A sweep's lightest point drew no arrival (no data) and one point failed every request:
    neither measured a TTFT, and before the plot drew both at 0 ms (the stats' zero of no
    request) on the line; now they are left out of it."""
    from bench.fullstack_report import plot
    from loadtest import plots

    folder = tmp_path / "r0.6-direct"
    folder.mkdir()
    empty = {"request_rate": 0.5, "completed": 0, "failed": 0, "scheduled_in_window": 0,
             "windows": {"steady_s": 30.0, "ramp_s": 5.0}, "p99_ttft_ms": 0.0}
    failed = {**measured(60.0, True), "completed": 0, "failed": 1800, "p99_ttft_ms": 0.0}
    for i, res in enumerate([empty, measured(20.0, True), measured(40.0, False), failed]):
        (folder / f"point-{i + 1:02d}-{res['request_rate']:g}.json").write_text(json.dumps(res))
    figs = []
    monkeypatch.setattr(plots, "save", lambda fig, path, plt: figs.append(fig) or str(path))
    plot(argparse.Namespace(results=tmp_path, slo="ttft_p99:1000", title="t"),
         tmp_path / "p.png")
    (line,) = [ln for ln in figs[0].axes[0].get_lines() if "vLLM alone" in ln.get_label()]
    assert list(zip(line.get_xdata(), line.get_ydata(), strict=True)) == [(20.0, 100.0),
                                                                          (40.0, 5000.0)]


def test_a_point_without_data_is_neither_met_nor_missed():
    """A point whose window drew no arrival answered nothing because nothing was offered: the
    load tester's sweep calls it no data (`meets_slo` None). Before, `judged` called every point
    without a successful request a miss; one that had arrivals and answered none still is."""
    from bench.fullstack_report import judged
    from loadtest import schedule
    from loadtest.stats import due_in

    slo = {"p99_ttft_ms": 1000.0}
    empty = {"request_rate": 0.5, "completed": 0, "failed": 0, "scheduled_in_window": 0,
             "windows": {"steady_s": 30.0, "ramp_s": 5.0}, "p99_ttft_ms": 0.0}
    assert judged(empty, slo) is None
    # measured before scheduled_in_window: recounted from its seeded schedule, none in the window
    old = {**empty, "request_rate": 0.01, "seed": 0}
    del old["scheduled_in_window"]
    assert due_in(schedule.offsets(0.01, 1.0, 0, None), 5.0, 35.0) == 0
    assert judged(old, slo) is None
    # arrivals, and no answer: every one failed, or none was sent
    assert judged({**measured(20.0, True), "completed": 0, "failed": 600}, slo) is False
    assert judged({**measured(20.0, True), "completed": 0}, slo) is False


def test_a_rate_without_data_bounds_no_goodput_in_the_report(tmp_path):
    """A cut sweep whose last point's window drew no arrival: before, that point was a miss, so
    the goodput below it read as exact (bracketed) and the ratio too; now it is a lower bound,
    and the rate is listed as no data beside the undecided ones."""
    cut = tmp_path / "r0.6-direct"
    cut.mkdir()
    empty = {"request_rate": 30.0, "completed": 0, "failed": 0, "scheduled_in_window": 0,
             "windows": {"steady_s": 30.0, "ramp_s": 5.0}, "p99_ttft_ms": 0.0}
    for i, res in enumerate([measured(10.0, True), measured(20.0, True), empty]):
        (cut / f"point-{i + 1:02d}-{res['request_rate']:g}.json").write_text(json.dumps(res))
    text = report(argparse.Namespace(results=tmp_path, slo="ttft_p99:1000", point_s=30.0))
    assert "| 0.6 | direct | baseline (unfinished) | ≥ 20.0 | 30 (no data) |" in text
    row = json.loads((tmp_path / "summary.json").read_text())["sweeps"][0]
    assert row["no_data"] == [30.0] and row["undecided"] == []
