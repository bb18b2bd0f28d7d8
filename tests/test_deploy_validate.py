"""Profiles against the vLLM installed here. Building vLLM's parser costs seconds: one per run."""

import importlib.util
import subprocess
import sys

import pytest

from deploy.profiles import apply_overrides, load_profile, profile_names
from deploy.validate import installed_vllm, validate


@pytest.fixture(scope="session")
def info():
    return installed_vllm()  # functools.cache: one parser per process


def errors(info, overrides, profile="cpu-tiny"):
    p = load_profile(profile)
    return validate(apply_overrides(p.serve, overrides), info, p.target).errors


def test_checked_in_profiles_fit_the_installed_vllm(info):
    has_arctic = importlib.util.find_spec("arctic_inference") is not None
    for name in profile_names():
        p = load_profile(name)
        errs = validate(p.serve, info, p.target).errors
        if name == "spec-suffix" and not has_arctic:
            assert errs == ["speculative method 'suffix' needs the arctic-inference package, "
                            "which is not installed here (PyPI has only its sdist: "
                            "bash bench/gpu/arctic/build_wheel.sh, then .gpuarc/install.sh)"]
        else:
            assert errs == [], name


def test_removed_and_unknown_flags_are_named_with_a_reason(info):
    (msg,) = errors(info, ["num-scheduler-steps=8"])
    assert msg.startswith("--num-scheduler-steps was removed") and "V1" in msg
    (msg,) = errors(info, ["calculate-kv-scales=true"])
    assert "--calculate-kv-scales was removed" in msg
    (msg,) = errors(info, ["max-num-seq=8"])
    assert msg.endswith("did you mean --max-num-seqs?")
    (msg,) = errors(info, ["enforce-eager=3"])
    assert "switch" in msg
    (msg,) = errors(info, ["max-model-len=true"])
    assert "takes a value" in msg


@pytest.mark.parametrize(("overrides", "expected"), [
    (["kv-cache-dtype=fp9"], "did you mean 'fp8'"),
    (["gpu-memory-utilization=1.5"], "must be in (0, 1]"),
    (["gpu-memory-utilization=0"], "must be in (0, 1]"),
    (["enable-chunked-prefill=false", "max-num-batched-tokens=1024"], "chunked prefill disabled"),
    (["max-num-batched-tokens=32", "max-num-seqs=64"], "< --max-num-seqs 64"),
    (["max-model-len=abc"], "is not valid"),
    (["speculative-config={bad"], "not valid JSON"),
    (['speculative-config={"method":"ngramm","num_speculative_tokens":3}'],
     "did you mean 'ngram'"),
    (['speculative-config={"method":"ngram","num_speculative_tokens":3,"lookup_max":4}'],
     "key 'lookup_max' is unknown"),
    (['speculative-config={"method":"draft_model","num_speculative_tokens":3}'],
     "needs a draft model"),
    (['speculative-config={"method":"ngram"}'], "needs num_speculative_tokens"),
    (['speculative-config={"method":"ngram","num_speculative_tokens":3,'
      '"prompt_lookup_min":5,"prompt_lookup_max":2}'], "must be <= prompt_lookup_max"),
    (["enable-auto-tool-choice=true"], "requires --tool-call-parser"),  # vLLM's own check
    (["model="], "no model"),
])
def test_impossible_combinations_are_rejected(info, overrides, expected):
    errs = errors(info, overrides)
    assert any(expected in e for e in errs), errs


def test_what_works_on_cpu_passes(info):
    ngram = '{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}'
    assert errors(info, ["kv-cache-dtype=fp8", "enable-chunked-prefill=true",
                         f"speculative-config={ngram}", "max-model-len=1k"]) == []
    assert errors(info, ["speculative-config.model=/d"], "spec-draft") == []


def test_cli_rejects_before_starting_and_dry_run_prints_the_command():
    # One subprocess that fails validation; the dry-run path is the same code plus print.
    run = subprocess.run([sys.executable, "-m", "deploy", "backend", "--profile", "tuned",
                          "--set", "num-scheduler-steps=4", "--set", "swap-space=4"],
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 2 and run.stdout == ""
    assert "--num-scheduler-steps was removed" in run.stderr
    assert "--swap-space was removed" in run.stderr
    dry = subprocess.run([sys.executable, "-m", "deploy", "backend", "--profile", "cpu-tiny",
                          "--port", "8123", "--model", "/m", "--dry-run", "--no-validate"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert dry.stdout.split()[1:7] == ["-m", "vllm.entrypoints.openai.api_server", "--model",
                                       "/m", "--host", "127.0.0.1"]
