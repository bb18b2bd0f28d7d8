"""Precision, recall and false-hit rate of the semantic cache on labelled pairs.

Input (--pairs FILE, or FILE; default: the test split, tests/data/judge/test.jsonl): JSONL,
one pair per line,
  {"a": "How do I reverse a list?", "b": "reverse a python list", "same": true}
`a` is stored, `b` looked up; `same` says whether one answer serves both (true/false, 1/0,
"true"/"false", "yes"/"no"). Optional: `kind` (breaks the mistakes down with --verbose) and
`family` (a name; when every pair has one, a family-bootstrap interval is added); other fields
are ignored. Blank lines, `#` comment lines, CRLF, a UTF-8 BOM and a JSON array of the same
objects are read; a bad line stops the run naming the file and line (exit status 2).

For every pair: store `a` in a fresh cache at the proxy's settings (PROXY_* variables or the
flags below, read as `python -m proxy serve` reads them: the same cosine floor, rules, judge
and threshold; embedded store, no shedding), look up `b`, and count a hit as a claim that the
two questions have the same answer. All pairs run concurrently over one embedder and judge.
The mode is the proxy's too: with PROXY_CACHE=exact only identical questions hit (no judge
runs), with PROXY_CACHE=off nothing does; a note on stderr says so.

Output: with --verbose, the mistakes on stderr, one a line, each question as a JSON string
("line one\\nline two"); as the last line on stdout (and in --output FILE), one JSON object:
pairs, true_hits, false_hits, missed, precision (true hits / hits), recall (true hits / equal
pairs), false_hit_rate (false hits / hits; each ratio null when there is nothing to divide
by), false_hit_rate_95ci (two-sided 95% Clopper-Pearson), with families
false_hit_rate_95ci_families, and the settings used: cache_mode (semantic, exact or off),
max_false_hit_rate, judge_threshold (null: +inf, the judge accepts nothing and only the same
question (verify.same_question) hits, as at the default 1% today; null too without a judge:
exact, off),
cosine_floor, judge_model. See docs/cache.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from proxy.cache import open_cache
from proxy.cache.calibrate import family_interval, interval
from proxy.cache.config import CacheConfig
from proxy.cache.embedder import Embedder
from proxy.cache.judge import Judge
from proxy.cache.pairs import PairsError, read_pairs
from proxy.types import CacheRequest, Completion

TEST_SPLIT = Path(__file__).resolve().parents[2] / "tests" / "data" / "judge" / "test.jsonl"


def _request(text: str) -> CacheRequest:
    body = {"model": "eval", "messages": [{"role": "user", "content": text}],
            "temperature": 0, "max_tokens": 32}
    return CacheRequest(kind="chat", body=body, tenant="", no_cache=False, no_store=False)


def _answer(text: str) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": "eval",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "A: " + text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}


async def _pair(cfg: CacheConfig, embedder: Embedder | None, judge: Judge | None, a: str,
                b: str) -> tuple[bool, Any]:
    cache = await open_cache(config=cfg, embedder=embedder, judge=judge)
    if cache is None:  # PROXY_CACHE=off: the proxy sends every request upstream
        return False, None
    first = await cache.lookup(_request(a))
    await cache.store(first.ticket, Completion(body=_answer(a)))
    second = await cache.lookup(_request(b))
    return second.status == "hit", second.similarity


# line breaks json.dumps leaves as they are (str.splitlines and editors break lines there)
_BREAKS = str.maketrans({"\x85": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"})


def _shown(text: str) -> str:
    """A question on one line of --verbose: a JSON string (newlines, tabs and control
    characters escaped, other text as it is), so that each mistake is one line."""
    return json.dumps(text, ensure_ascii=False).translate(_BREAKS)


# what the proxy serves without its semantic tier (PROXY_CACHE=exact or off)
_NO_SEMANTIC = {"exact": "the proxy has no semantic tier: only a question identical to the "
                         "stored one, character for character, hits",
                "off": "the proxy caches nothing: no pair hits"}


def settings(flags: dict[str, str | None] | None = None) -> CacheConfig:
    """The cache's settings as the proxy reads them (proxy.settings_env: PROXY_* variables, then
    the proxy's own flags, `--cache-threshold` ...), with the proxy's checks; ValueError."""
    from proxy.settings_env import load_settings

    return CacheConfig.from_settings(load_settings(None, flags))


async def evaluate(pairs: list[dict[str, Any]], cfg: CacheConfig | None = None,
                   verbose: bool = False) -> dict[str, Any]:
    cfg = cfg or settings()
    # every pair is looked up at once: no shedding, the embedder embeds and the judge scores
    # them all (a shed lookup would count as a miss, and the evaluation is of the judge, not of
    # its queues); the mode is the proxy's: exact has no semantic tier, off no cache (until
    # 2026-11-28 both were evaluated as semantic, hits the proxy at those settings never
    # serves)
    cfg = replace(cfg, redis_url=None, snapshot=None, shared=False, judge_max_pending=0,
                  embed_max_pending=0)
    embedder: Embedder | None = None
    judge: Judge | None = None
    if cfg.mode == "semantic":
        embedder = await Embedder.load(cfg.embed_model, cfg.embed_threads, cfg.embed_backend)
        judge = await Judge.load(cfg.max_false_hit_rate, cfg.judge_dir, cfg.judge_threads)
    else:
        print(f"note: PROXY_CACHE={cfg.mode}: {_NO_SEMANTIC[cfg.mode]}; evaluated so "
              "(PROXY_CACHE=semantic for the judge; docs/cache.md)", file=sys.stderr)
    try:
        results = await asyncio.gather(*(_pair(cfg, embedder, judge, p["a"], p["b"])
                                         for p in pairs))
    finally:
        if embedder is not None:
            await embedder.aclose()
        if judge is not None:
            judge.close()
    true_hits = false_hits = missed = 0
    wrong: Counter[str] = Counter()
    for pair, (hit, sim) in zip(pairs, results, strict=True):
        same = bool(pair["same"])
        true_hits += hit and same
        false_hits += hit and not same
        missed += same and not hit
        if hit != same:
            wrong["false hit" if hit else "missed"] += 1
            wrong[f"{'false hit' if hit else 'missed'} / {pair.get('kind', '?')}"] += 1
            if verbose:
                kind = "FALSE HIT" if hit else "MISSED"
                print(f"{kind} sim={sim} | {_shown(pair['a'])} | {_shown(pair['b'])}",
                      file=sys.stderr)
    if verbose:
        for key, n in sorted(wrong.items()):
            print(f"{key}: {n}", file=sys.stderr)
    if judge is not None and math.isinf(judge.threshold):  # judge_threshold is then null
        why = (f"its reference pairs drifted by {judge.drift:.3f} on this CPU" if judge.drifted
               else f"no threshold on dev promises a false-hit rate of {cfg.max_false_hit_rate}")
        print(f"note: the judge accepts nothing ({why}): as in the proxy, only the same question "
              "(its spacing, end punctuation, opening capital aside) hits (set "
              "PROXY_CACHE_MAX_FALSE_HIT_RATE for a looser bound; docs/cache.md)",
              file=sys.stderr)
    positives = sum(bool(p["same"]) for p in pairs)
    hits = true_hits + false_hits
    low, high = interval(false_hits, hits)
    by_family: dict[str, Any] = {}
    if pairs and all("family" in p for p in pairs):  # pairs of one family err together
        flo, fhi = family_interval([hit for hit, _ in results],
                                   [not p["same"] for p in pairs], [p["family"] for p in pairs])
        by_family = {"false_hit_rate_95ci_families": [round(flo, 4), round(fhi, 4)]}
    return {"pairs": len(pairs), "true_hits": true_hits, "false_hits": false_hits,
            # a ratio with nothing to count is null, not a perfect score
            "missed": missed, "precision": round(true_hits / hits, 4) if hits else None,
            "recall": round(true_hits / positives, 4) if positives else None,
            "false_hit_rate": round(false_hits / hits, 4) if hits else None,
            "false_hit_rate_95ci": [round(low, 4), round(high, 4)], **by_family,
            "cache_mode": cfg.mode, "max_false_hit_rate": cfg.max_false_hit_rate,
            # null without a judge (exact, off) as at +inf: it accepts nothing
            "judge_threshold": judge.threshold if judge is not None else None,
            "cosine_floor": cfg.threshold, "judge_model": cfg.judge_model}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m proxy.cache.evaluate",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pairs_file", type=Path, nargs="?", help="same as --pairs")
    parser.add_argument("--pairs", type=Path, default=None,
                        help="JSONL of labelled pairs (format above)")
    # the proxy's own flags (python -m proxy serve --cache-...), read as it reads them
    parser.add_argument("--cache", metavar="MODE", help="semantic, exact (identical questions "
                        "only) or off (no hits) (env PROXY_CACHE; default semantic)")
    parser.add_argument("--cache-threshold", "--threshold", dest="cache_threshold",
                        metavar="FLOOR", help="cosine floor, in (0, 1] "
                        "(env PROXY_CACHE_THRESHOLD; default 0.40)")
    parser.add_argument("--cache-max-false-hit-rate", "--max-false-hit-rate",
                        dest="cache_max_false_hit_rate", metavar="RATE",
                        help="the judge's false-hit bound, in (0, 1) "
                        "(env PROXY_CACHE_MAX_FALSE_HIT_RATE; default 0.01)")
    parser.add_argument("--cache-judge-model", "--judge-model", dest="cache_judge_model",
                        metavar="JUDGE", help="mpnet, minilm or a directory made by "
                        "tools.judge.train (env PROXY_CACHE_JUDGE_MODEL; default mpnet)")
    parser.add_argument("--verbose", action="store_true",
                        help="print each mistake and their counts by kind on stderr")
    parser.add_argument("--output", "-o", type=Path, default=None, metavar="FILE",
                        help="also write the JSON report to FILE")
    args = parser.parse_args(argv)
    if args.pairs and args.pairs_file and args.pairs != args.pairs_file:
        parser.error(f"two pairs files: {args.pairs_file} and --pairs {args.pairs}")
    path = args.pairs or args.pairs_file or TEST_SPLIT
    try:
        cfg = settings({k: getattr(args, k) for k in (
            "cache", "cache_threshold", "cache_max_false_hit_rate", "cache_judge_model")})
    except ValueError as exc:  # proxy.settings.SettingsError among them
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    try:
        pairs = read_pairs(path)
    except PairsError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    report = asyncio.run(evaluate(pairs, cfg, args.verbose))
    line = orjson.dumps(report).decode()
    print(line, flush=True)  # first: a report that cannot be written is still shown
    if args.output is not None:
        try:
            args.output.write_text(line + "\n")
        except OSError as exc:
            parser.exit(1, f"{parser.prog}: error: cannot write {args.output} "
                        f"({exc.strerror or exc})\n")


if __name__ == "__main__":
    main()
