import pytest

from loadtest.metrics_scrape import deltas, parse, summary

BEFORE = """# TYPE vllm:prefix_cache_hits counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 10.0
# TYPE vllm:prefix_cache_queries counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 100.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0"} 1.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0"} 100.0
vllm:prompt_tokens_created{engine="0"} 1.7e9
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total 0.0
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total 0.0
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total 0.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0"} 0.0
# TYPE proxy_cache_lookups counter
proxy_cache_lookups_total{status="hit"} 2.0
proxy_cache_lookups_total{status="miss"} 3.0
"""

AFTER = BEFORE.replace("hits_total{engine=\"0\",model_name=\"tiny\"} 10.0",
                       "hits_total{engine=\"0\",model_name=\"tiny\"} 70.0") \
    .replace("queries_total{engine=\"0\",model_name=\"tiny\"} 100.0",
             "queries_total{engine=\"0\",model_name=\"tiny\"} 200.0") \
    .replace("num_preemptions_total{engine=\"0\"} 1.0", "num_preemptions_total{engine=\"0\"} 3.0") \
    .replace("drafts_total 0.0", "drafts_total 10.0") \
    .replace("draft_tokens_total 0.0", "draft_tokens_total 30.0") \
    .replace("accepted_tokens_total 0.0", "accepted_tokens_total 15.0") \
    .replace('status="hit"} 2.0', 'status="hit"} 12.0')


def test_parse_sums_label_sets_and_drops_created():
    m = parse(BEFORE)
    assert m["proxy_cache_lookups_total"] == 5.0
    assert "vllm:prompt_tokens_created" not in m


def test_deltas_and_the_summary_rows():
    b, a = parse(BEFORE), parse(AFTER)
    d = deltas(b, a)
    assert d["vllm:prefix_cache_hits_total"] == 60 and "vllm:prompt_tokens_total" not in d
    s = summary(d, a, {"vllm:kv_cache_usage_perc": 0.42})
    assert s["Prefix cache hit rate (%)"] == pytest.approx(60.0)
    assert s["Preemptions"] == 2
    assert s["KV-cache usage peak (%)"] == pytest.approx(42.0)
    assert s["Spec-decode acceptance rate (%)"] == pytest.approx(50.0)
    assert s["Spec-decode acceptance length"] == pytest.approx(2.5)
    assert s["proxy_cache_lookups_total"] == 10


def test_server_means_and_the_referee():
    from loadtest.metrics_scrape import referee, summary

    d = {"vllm:time_to_first_token_seconds_sum": 2.0,
         "vllm:time_to_first_token_seconds_count": 40.0,
         "vllm:inter_token_latency_seconds_sum": 4.0,
         "vllm:inter_token_latency_seconds_count": 400.0}
    s = summary(d, {"vllm:prompt_tokens_total": 1.0}, {})
    assert s["Server mean TTFT (ms)"] == 50.0 and s["Server mean ITL (ms)"] == 10.0
    res = {"server_metrics": {"target": {"summary": s}},
           "mean_ttft_ms": 52.0, "mean_itl_ms": 14.0}
    warnings = referee(res)
    assert len(warnings) == 1 and "mean_itl_ms" in warnings[0] and "40%" in warnings[0]
    assert referee({"mean_ttft_ms": 99.0}) == []  # no server histograms: nothing to judge


def test_each_scrape_keeps_its_gauge_peaks_for_the_repeats_pooling(monkeypatch):
    """--repeats recomputes the summary from every run's scrape (pool.server): a run's gauge
    peaks travel with its deltas, or the pooled KV-cache peak would read 0."""
    import asyncio

    from loadtest import metrics_scrape

    first = {"vllm:kv_cache_usage_perc": 0.1, "vllm:prompt_tokens_total": 0.0}
    later = {"vllm:kv_cache_usage_perc": 0.7, "vllm:prompt_tokens_total": 80.0}
    seen = iter([first])

    async def scrape(http, url):
        return dict(next(seen, later))

    monkeypatch.setattr(metrics_scrape, "scrape", scrape)

    async def one_run():
        s = metrics_scrape.Scraper({"backend": "http://b/metrics"})
        await s.start()
        return await s.stop()

    got = asyncio.run(one_run())["backend"]
    assert got["peak"] == {"vllm:kv_cache_usage_perc": 0.7}
    assert got["deltas"] == {"vllm:prompt_tokens_total": 80.0}
