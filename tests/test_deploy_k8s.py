"""deploy/k8s: parse every manifest and check that the pieces fit together."""

from pathlib import Path

import yaml

from deploy.backend import SERVE_ENTRY, build_command
from deploy.profiles import load_profile

K8S = Path(__file__).resolve().parents[1] / "deploy" / "k8s"


def objects():
    docs = {}
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") != "Kustomization":
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    return docs


def container(docs, name):
    return docs[("Deployment", name)]["spec"]["template"]["spec"]["containers"][0]


def test_kustomization_lists_every_manifest():
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kust["resources"]) == sorted(
        p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def test_services_select_pods_and_ports_exist():
    docs = objects()
    for (kind, name), svc in docs.items():
        if kind != "Service":
            continue
        dep = docs[("Deployment", name)]
        labels = dep["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= labels.items(), name
        assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        port_names = {p["name"] for c in dep["spec"]["template"]["spec"]["containers"]
                      for p in c["ports"]}
        for port in svc["spec"]["ports"]:
            assert port["targetPort"] in port_names, name


def test_proxy_replicas_probes_resources_and_shared_redis():
    docs = objects()
    dep = docs[("Deployment", "proxy")]
    assert dep["spec"]["replicas"] >= 2
    c = container(docs, "proxy")
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready"
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["PROXY_UPSTREAM"] == "http://vllm:8000"
    assert env["PROXY_REDIS_URL"] == "redis://redis:6379/0"
    assert dep["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    for name in ("proxy", "vllm", "redis"):
        assert {"cpu", "memory"} <= set(container(docs, name)["resources"]["requests"]), name
    hpa = docs[("HorizontalPodAutoscaler", "proxy")]["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                     "name": "proxy"}
    assert 1 <= hpa["minReplicas"] <= hpa["maxReplicas"]


def test_vllm_is_a_gpu_deployment_with_the_baseline_profile():
    docs = objects()
    c = container(docs, "vllm")
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["readinessProbe"]["httpGet"]["path"] == "/health"
    assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 300
    assert c["command"] == ["python3", *SERVE_ENTRY]
    expected = build_command(dict(load_profile("baseline").serve, model="/models/model"),
                             host="0.0.0.0", port=8000, python="python3")[len(SERVE_ENTRY) + 1:]
    assert c["args"] == expected
    claim = docs[("Deployment", "vllm")]["spec"]["template"]["spec"]["volumes"][0]
    assert ("PersistentVolumeClaim", claim["persistentVolumeClaim"]["claimName"]) in docs


def test_the_two_replica_overlay_adds_a_prefix_caching_replica_and_routes_by_prefix():
    from proxy.settings_env import load_settings

    overlay = K8S / "two-replicas"
    kust = yaml.safe_load((overlay / "kustomization.yaml").read_text())
    assert kust["resources"][0] == ".." and all((overlay / r).is_file()
                                               for r in kust["resources"][1:])
    patches = {p["path"]: yaml.safe_load((overlay / p["path"]).read_text())
               for p in kust["patches"]}
    base = objects()
    for patch in patches.values():  # each patch names a base Deployment and its container
        name = patch["metadata"]["name"]
        assert patch["spec"]["template"]["spec"]["containers"][0]["name"] == \
            container(base, name)["name"]
    expected = build_command(dict(load_profile("prefix-caching").serve, model="/models/model"),
                             host="0.0.0.0", port=8000, python="python3")[len(SERVE_ENTRY) + 1:]
    b_docs = {(d["kind"], d["metadata"]["name"]): d for d in
              yaml.safe_load_all((overlay / "vllm-b.yaml").read_text())}
    b = b_docs[("Deployment", "vllm-b")]["spec"]["template"]["spec"]["containers"][0]
    assert b["args"] == expected == \
        patches["patch-vllm.yaml"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert b["resources"] == container(base, "vllm")["resources"]
    svc = b_docs[("Service", "vllm-b")]["spec"]["selector"]
    assert svc.items() <= b_docs[("Deployment", "vllm-b")]["spec"]["template"]["metadata"][
        "labels"].items()
    env = {e["name"]: e["value"] for e in
           patches["patch-proxy.yaml"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    settings = load_settings(env)
    assert settings.upstreams == ("http://vllm:8000", "http://vllm-b:8000")
    assert settings.routing == "prefix"
