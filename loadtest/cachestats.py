"""Everything split by X-Cache, the hit rate, upstream tokens avoided, wrong cached answers."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from loadtest.client import Result
from loadtest.stats import summarize

SPLIT_KEYS = ("completed", "failed", "request_throughput", "output_throughput",
              "total_input_tokens", "total_output_tokens")


def split(results: Sequence[Result], duration: float, percentiles: Sequence[float]
          ) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        groups[r.cache].append(r)
    return {k: summarize(v, duration, percentiles) for k, v in sorted(groups.items())}


def norm(text: str) -> str:
    return " ".join(text.split())


def judge_hits(results: Sequence[Result], reference: Sequence[Result] | None = None
               ) -> dict[str, int]:
    """A hit is wrong when its text is not what a miss answered for the same canonical question
    (or is what a miss answered for another one). Hits with no such reference are unverified.
    The answers come from `reference` (default: `results`), so a hit in the steady window is
    judged against a miss answered during ramp-up too."""
    answers: dict[str, set[str]] = defaultdict(set)
    owner: dict[str, set[str]] = defaultdict(set)
    for r in results if reference is None else reference:
        if r.success and r.cache != "hit" and r.canonical_id is not None:
            answers[r.canonical_id].add(norm(r.text))
            owner[norm(r.text)].add(r.canonical_id)
    out = {"correct": 0, "wrong": 0, "unverified": 0}
    for r in results:
        if not (r.success and r.cache == "hit" and r.canonical_id is not None):
            continue
        text, own = norm(r.text), answers.get(r.canonical_id, set())
        if text in own:
            out["correct"] += 1
        elif own or owner.get(text, set()) - {r.canonical_id}:
            out["wrong"] += 1
        else:
            out["unverified"] += 1
    return out


def cache_summary(results: Sequence[Result], reference: Sequence[Result] | None = None
                  ) -> dict[str, Any]:
    """The cache statistics of `results` (a run's steady window); the wrong-answer check takes
    its reference answers from `reference` (every request of the run; default: `results`)."""
    reference = results if reference is None else reference
    ok = [r for r in results if r.success]
    n = {k: sum(1 for r in ok if r.cache == k) for k in ("hit", "miss", "bypass", "none")}
    lookups = n["hit"] + n["miss"]
    hits = [r for r in ok if r.cache == "hit"]
    d: dict[str, Any] = {
        "hits": n["hit"], "misses": n["miss"], "bypassed": n["bypass"], "unlabelled": n["none"],
        "hit_rate": n["hit"] / lookups if lookups else 0.0,
        "hit_share": n["hit"] / len(ok) if ok else 0.0,
        "upstream_prompt_tokens_avoided": sum(r.prompt_tokens for r in hits),
        "upstream_output_tokens_avoided": sum(r.output_tokens for r in hits),
    }
    if any(r.canonical_id is not None for r in reference):
        judged = judge_hits(results, reference)
        d.update({"wrong_cached_answers": judged["wrong"], "correct_cached_answers":
                  judged["correct"], "unverified_cached_answers": judged["unverified"]})
        kinds: dict[str, dict[str, int]] = defaultdict(lambda: {"requests": 0, "hits": 0})
        for r in ok:
            kinds[r.kind]["requests"] += 1
            kinds[r.kind]["hits"] += r.cache == "hit"
        d["by_kind"] = dict(kinds)
    return d
