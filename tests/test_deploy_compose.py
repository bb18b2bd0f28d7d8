"""deploy/compose.yaml, Prometheus and the Grafana dashboard: parse them, and check every
panel's metric against what the proxy registers and what vLLM exports."""

import importlib.util
import json
import re
from pathlib import Path

import httpx
import pytest
import yaml

from deploy.backend import SERVE_ENTRY, build_command
from deploy.profiles import load_profile

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
METRIC = re.compile(r"\b(proxy_[a-z0-9_]+|vllm:[a-z0-9_:]+)")


def compose(name: str = "compose.yaml"):
    return yaml.safe_load((DEPLOY / name).read_text())


def dashboard():
    return json.loads((DEPLOY / "grafana" / "dashboard.json").read_text())


def panel_metrics():
    out: dict[str, set[str]] = {}
    for panel in dashboard()["panels"]:
        for target in panel.get("targets", []):
            for name in METRIC.findall(target["expr"]):
                out.setdefault(name, set()).add(panel["title"])
    return out


def proxy_exported_names():
    from prometheus_client import CollectorRegistry

    from proxy.cache.metrics import CacheMetrics
    from proxy.metrics import Metrics

    cache_registry = CollectorRegistry()
    CacheMetrics(cache_registry)
    names: set[str] = set()
    for registry in (Metrics().registry, cache_registry):
        names |= set(registry._names_to_collectors)  # every exported sample name
    return names


def test_compose_has_the_full_stack_and_its_files_exist():
    c = compose()
    assert set(c["services"]) == {"proxy", "vllm", "redis", "prometheus", "grafana"}
    gpu = c["services"]["vllm"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert gpu["driver"] == "nvidia" and "gpu" in gpu["capabilities"]
    build = c["services"]["proxy"]["build"]
    assert (DEPLOY / build["context"] / build["dockerfile"]).is_file()
    for name, svc in c["services"].items():
        for volume in svc.get("volumes", []):
            src = volume.split(":")[0]
            if src.startswith("./"):
                assert (DEPLOY / src).exists(), f"{name} mounts missing {src}"
    for name in ("proxy", "vllm", "redis"):
        assert "healthcheck" in c["services"][name] or name == "proxy"  # image has HEALTHCHECK


def test_compose_vllm_runs_the_baseline_profile():
    svc = compose()["services"]["vllm"]
    assert svc["entrypoint"] == ["python3", *SERVE_ENTRY]
    expected = build_command(dict(load_profile("baseline").serve, model="/models/model"),
                             host="0.0.0.0", port=8000, python="python3")[len(SERVE_ENTRY) + 1:]
    assert svc["command"] == expected, (
        "compose's vLLM flags drifted from the baseline profile; render them with "
        "python -m deploy backend --profile baseline --model /models/model --host 0.0.0.0 "
        "--port 8000 --dry-run --no-validate")


def test_proxy_env_is_what_the_proxy_reads_and_points_at_the_services():
    from proxy.settings_env import _SPEC

    env = compose()["services"]["proxy"]["environment"]
    assert set(env) <= {var for var, _, _ in _SPEC.values()}
    assert env["PROXY_UPSTREAM"] == "http://vllm:8000"
    assert env["PROXY_REDIS_URL"].startswith("redis://redis:6379")
    assert env["PROXY_HOST"] == "0.0.0.0"


def test_the_two_replica_overlay_routes_by_prefix_over_two_gpus():
    base, over = compose(), compose("compose.replicas.yaml")
    from proxy.settings_env import _SPEC, load_settings

    env = {**base["services"]["proxy"]["environment"], **over["services"]["proxy"]["environment"]}
    assert set(env) <= {var for var, _, _ in _SPEC.values()}
    settings = load_settings(env)
    assert settings.upstreams == ("http://vllm:8000", "http://vllm-b:8000")
    assert settings.routing == "prefix"
    expected = build_command(dict(load_profile("prefix-caching").serve, model="/models/model"),
                             host="0.0.0.0", port=8000, python="python3")[len(SERVE_ENTRY) + 1:]
    b = over["services"]["vllm-b"]
    assert over["services"]["vllm"]["command"] == b["command"] == expected
    assert b["entrypoint"] == base["services"]["vllm"]["entrypoint"]
    assert b["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["1"]
    assert set(over["services"]["proxy"]["depends_on"]) == {"vllm-b"}


def test_prometheus_scrapes_both_and_grafana_reads_prometheus():
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"]}
    assert targets == {"proxy": ["proxy:8000"], "vllm": ["vllm:8000"]}
    prov = DEPLOY / "grafana" / "provisioning"
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yaml").read_text())["datasources"][0]
    assert ds["url"] == "http://prometheus:9090"
    uids = {t["datasource"]["uid"] for p in dashboard()["panels"] for t in p.get("targets", [])}
    assert uids == {ds["uid"]}
    provider = yaml.safe_load((prov / "dashboards" / "provider.yaml").read_text())["providers"][0]
    mounts = compose()["services"]["grafana"]["volumes"]
    assert any(m.startswith("./grafana/dashboard.json:" + provider["options"]["path"])
               for m in mounts)


def test_dashboard_covers_what_matters_and_proxy_metrics_exist():
    d = dashboard()
    assert len({p["id"] for p in d["panels"]}) == len(d["panels"])
    names = panel_metrics()
    for needed in ("proxy_cache_lookups_total", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc", "vllm:spec_decode_num_accepted_tokens_total",
                   "vllm:prefix_cache_hits_total"):
        assert needed in names
    exported = proxy_exported_names()
    missing = {n: sorted(t) for n, t in names.items() if n.startswith("proxy_")
               and n not in exported}
    assert not missing, f"panels use metrics the proxy does not register: {missing}"


@pytest.mark.vllm
def test_dashboard_vllm_metrics_exist_in_vllm(vllm):
    text = httpx.get(vllm.url + "/metrics", timeout=30).text
    live = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line.startswith("vllm:")}
    # Spec-decode counters appear only when speculative decoding runs: take them from the
    # installed vLLM's source instead (counters export NAME_total).
    origin = importlib.util.find_spec("vllm").origin  # no import: that takes seconds
    src = (Path(origin).parent / "v1" / "spec_decode" / "metrics.py").read_text()
    spec = {f"{n}_total" for n in re.findall(r'"(vllm:spec_decode_[a-z_]+)"', src)}
    missing = {n: sorted(t) for n, t in panel_metrics().items() if n.startswith("vllm:")
               and n not in live | spec}
    assert not missing, f"panels use metrics vLLM does not export: {missing}"
