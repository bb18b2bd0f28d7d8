import re
import subprocess
import sys

import pytest

from deploy.backend import build_command, flag_args
from deploy.profiles import (
    PROFILES_DIR,
    ProfileError,
    apply_overrides,
    diff_table,
    load_profile,
    parse_value,
    profile_names,
)

REQUIRED = {"baseline", "fp8-kv", "chunked-prefill", "prefix-caching", "spec-ngram", "spec-suffix",
            "spec-draft", "tuned", "cpu-tiny"}
GPU_KEYS = {"model", "max-model-len", "max-num-seqs", "max-num-batched-tokens",
            "gpu-memory-utilization", "kv-cache-dtype"}


def test_every_required_profile_exists_and_loads():
    assert set(profile_names()) >= REQUIRED
    for name in profile_names():
        p = load_profile(name)
        assert p.description and p.target in ("gpu", "cpu") and p.serve.get("model")
        if p.target == "gpu":
            assert set(p.serve) >= GPU_KEYS, name
        if name.startswith("spec-") or name == "tuned":
            assert "method" in p.serve["speculative-config"], name


def test_every_flag_has_a_comment_on_what_it_trades():
    for path in PROFILES_DIR.glob("*.toml"):
        lines = path.read_text().splitlines()
        serve = lines.index("[serve]")
        for i, line in enumerate(lines[serve + 1:], serve + 1):
            if re.match(r"^[a-z][a-z0-9-]* *=", line):
                commented = "#" in line.split("=", 1)[1] or lines[i - 1].lstrip().startswith("#")
                key = line.split("=")[0].strip()
                assert commented, f"{path.name}:{i + 1}: {key} has no comment"


def test_feature_profiles_differ_from_baseline_in_their_feature():
    base = load_profile("baseline").serve

    def changed(name):
        return {k for k, v in load_profile(name).serve.items() if base.get(k) != v}

    assert changed("fp8-kv") == {"kv-cache-dtype"}
    assert changed("chunked-prefill") == {"enable-chunked-prefill", "max-num-batched-tokens"}
    assert changed("prefix-caching") == {"enable-prefix-caching"}
    assert changed("spec-ngram") == {"speculative-config"}
    assert changed("spec-suffix") == {"speculative-config"}
    assert {"speculative-config"} <= changed("spec-draft")


def test_overrides_types_drop_and_nested_json():
    serve = {"model": "m", "max-num-seqs": 8, "speculative-config": {"method": "ngram"}}
    out = apply_overrides(serve, ["max-num-seqs=16", "enforce-eager=true", "model=",
                                  "speculative-config.num_speculative_tokens=3",
                                  "--kv-cache-dtype=fp8"])
    assert out == {"max-num-seqs": 16, "enforce-eager": True, "kv-cache-dtype": "fp8",
                   "speculative-config": {"method": "ngram", "num_speculative_tokens": 3}}
    assert serve["max-num-seqs"] == 8  # not mutated
    assert parse_value('{"a": 1}') == {"a": 1} and parse_value("0.5") == 0.5
    assert parse_value("512M") == "512M" and parse_value("{bad") == "{bad"
    with pytest.raises(ProfileError):
        apply_overrides(serve, ["novalue"])
    with pytest.raises(ProfileError):
        apply_overrides(serve, ["max-num-seqs.x=1"])
    with pytest.raises(ProfileError, match=r"known: .*baseline"):
        load_profile("nope")


def test_render_is_the_exact_command():
    serve = dict(load_profile("cpu-tiny").serve, model="/m")
    cmd = build_command(serve, host="127.0.0.1", port=8123, python="py")
    assert cmd == ["py", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m",
                   "--host", "127.0.0.1", "--port", "8123", "--served-model-name", "tiny",
                   "--dtype", "bfloat16", "--max-model-len", "2048",
                   "--kv-cache-memory-bytes", "512M", "--enable-prefix-caching",
                   "--block-size", "128", "--max-num-seqs", "64"]
    args = flag_args(load_profile("tuned").serve)
    assert "--enable-chunked-prefill" in args and "--no-enable-chunked-prefill" not in args
    spec = args[args.index("--speculative-config") + 1]
    assert spec.startswith('{"method":"ngram"')
    assert "--no-enable-prefix-caching" in flag_args(load_profile("baseline").serve)


def test_diff_shows_only_what_differs():
    table = diff_table(["baseline", "fp8-kv"])
    assert table.splitlines()[0].split() == ["flag", "baseline", "fp8-kv"]
    assert [r.split() for r in table.splitlines()[1:]] == [["kv-cache-dtype", "auto", "fp8"]]
    assert diff_table(["baseline", "baseline"]) == "no differences"
    assert "served-model-name" in diff_table(["baseline"])


def test_profiles_command_lists_and_diffs():
    run = [sys.executable, "-m", "deploy", "profiles"]
    listing = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert {line.split()[0] for line in listing.splitlines()} >= REQUIRED
    diff = subprocess.run([*run, "baseline", "tuned"], capture_output=True, text=True,
                          check=True).stdout
    assert "speculative-config" in diff and "served-model-name" not in diff
    bad = subprocess.run([*run, "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown profile" in bad.stderr
