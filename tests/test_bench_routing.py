"""The routing benches' pure parts: the shared-prefix datasets and the GPU report."""

import json

from bench.routing_gpu import report
from bench.routing_workload import rows


def test_datasets_share_each_tenants_prefix_and_honour_the_hot_share():
    even = rows(tenants=10, prefix_words=50, question_words=4, n=2000, hot=0.0, seed=1)
    hot = rows(tenants=10, prefix_words=50, question_words=4, n=2000, hot=0.8, seed=1)
    prompts = [r["conversations"][0]["value"] for r in even]
    assert len({p.split("\n\n")[0] for p in prompts}) == 10 and len(set(prompts)) == 2000
    share = sum(r["id"].startswith("t0-") for r in hot) / len(hot)
    assert 0.78 < share < 0.85  # 0.8 plus tenant 0's even share of the rest


def test_report_gives_intervals_hit_rates_imbalance_and_ratios(tmp_path):
    a, b, px = "http://127.0.0.1:8101", "http://127.0.0.1:8102", "http://127.0.0.1:8000"

    def record(policy, repeat, p90, routed_a, routed_b):
        return {"case": "tenants", "policy": policy, "repeat": repeat, "replicas": [a, b],
                "proxy": px, "loadtest": {"median_ttft_ms": p90 / 2, "p90_ttft_ms": p90,
                                          "p99_ttft_ms": p90 * 2, "request_throughput": 10.0,
                                          "request_goodput": 9.0},
                "counters": {a: {"vllm:prefix_cache_hits_total": 50.0,
                                 "vllm:prefix_cache_queries_total": 100.0},
                             b: {"vllm:prefix_cache_hits_total": 90.0,
                                 "vllm:prefix_cache_queries_total": 100.0},
                             px: {f'proxy_routed_requests_total{{upstream="{a}"}}': routed_a,
                                  f'proxy_routed_requests_total{{upstream="{b}"}}': routed_b}}}

    for i, p90 in enumerate((1000.0, 1200.0)):
        (tmp_path / f"tenants-least-loaded-{i}.json").write_text(
            json.dumps(record("least-loaded", i, p90, 50, 50)))
        (tmp_path / f"tenants-prefix-{i}.json").write_text(
            json.dumps(record("prefix", i, p90 / 4, 60, 40)))
    text = report(tmp_path)
    assert "| tenants | prefix | 137.5 ± " in text and "0.50 / 0.90 | 1.50 |" in text
    assert "prefix TTFT p90 least-loaded/prefix = 4.00x, throughput prefix/least-loaded = 1.00x" \
        in text
    assert json.loads((tmp_path / "summary.json").read_text())["tenants/prefix"]["imbalance"] \
        == 1.5


def test_pooled_ratio_reads_per_request_files(tmp_path, capsys):
    import gzip

    from bench.routing_pooled import main

    for policy, ttft in (("least-loaded", 0.2), ("prefix", 0.1)):
        for run in range(2):
            with gzip.open(tmp_path / f"tenants-{policy}-{run}.requests.jsonl.gz", "wt") as f:
                for i in range(50):
                    f.write(json.dumps({"success": True, "ttft": ttft * (1 + i / 100)}) + "\n")
                f.write(json.dumps({"success": False, "ttft": 99.0}) + "\n")
    assert main([str(tmp_path), "--resamples", "50"]) == 0
    out = capsys.readouterr().out
    assert "tenants: TTFT p90 least-loaded/prefix = 2.00x [" in out
    assert "(runs: least-loaded 288.2, 288.2 ms; prefix 144.1, 144.1 ms)" in out
    assert "session" not in out
