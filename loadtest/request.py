"""One request of a workload, and the workload's settings: the load tester's shared vocabulary
(workload.py and cachework.py both build on it)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Request:
    index: int
    prompt: str
    max_tokens: int
    prompt_len: int | None = None   # known when a tokenizer sized it
    ignore_eos: bool = False
    canonical_id: str | None = None  # cache workload: which question this really is
    kind: str = ""                   # cache workload: new / repeat / paraphrase / near_miss
    user: str | None = None          # sent as the body's `user` (a ShareGPT row's own `user`)


@dataclass(frozen=True)
class WorkloadConfig:
    name: str = "random"
    seed: int = 0
    input_len: int = 128
    output_len: int = 32
    range_ratio: float = 0.0
    ignore_eos: bool = False
    dataset_path: str | None = None
    prefix_len: int = 256
    suffix_len: int = 32
    num_prefixes: int = 4
    cache: dict[str, float] = field(default_factory=dict)
