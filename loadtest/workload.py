"""Workloads: what to send. Each is an endless, seeded stream of `Request`s."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from loadtest.cachework import cache_stream, zipf_pick
from loadtest.request import Request, WorkloadConfig
from loadtest.tokens import Tokenizer

# Filler vocabulary when no tokenizer is given: common words that are ~1 token each in BPE vocabs.
WORDS = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force"
).split()


def length_bounds(mean: int, ratio: float, floor: int = 1) -> tuple[int, int]:
    if not 0.0 <= ratio < 1.0:
        raise ValueError(f"range ratio must be in [0, 1), got {ratio}")
    low = max(floor, math.floor(mean * (1 - ratio)))
    return low, max(low, math.ceil(mean * (1 + ratio)))


def words_text(rng: np.random.Generator, n: int) -> str:
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), size=n))


def exact_token_text(tok: Tokenizer, ids: list[int], target: int,
                     rng: np.random.Generator, allowed: np.ndarray) -> tuple[str, int]:
    """Decode, re-encode and pad/trim until the text is `target` tokens (vLLM's approach)."""
    text = tok.decode(ids)
    for _ in range(10):
        ids = tok.encode(text)
        if len(ids) == target:
            break
        if len(ids) < target:
            ids = ids + allowed[rng.integers(0, len(allowed), size=target - len(ids))].tolist()
        else:
            ids = ids[:target]
        text = tok.decode(ids)
    return text, len(tok.encode(text))


def allowed_ids(tok: Tokenizer) -> np.ndarray:
    special = tok.special_ids()
    return np.array([i for i in range(tok.vocab_size) if i not in special])


def random_stream(cfg: WorkloadConfig, tok: Tokenizer | None) -> Iterator[Request]:
    rng = np.random.default_rng(cfg.seed)
    in_lo, in_hi = length_bounds(cfg.input_len, cfg.range_ratio)
    out_lo, out_hi = length_bounds(cfg.output_len, cfg.range_ratio)
    allowed = allowed_ids(tok) if tok is not None else None
    for i in itertools.count():
        n_in = int(rng.integers(in_lo, in_hi + 1))
        n_out = int(rng.integers(out_lo, out_hi + 1))
        if tok is not None and allowed is not None:
            offset = int(rng.integers(0, len(allowed)))
            ids = allowed[(offset + i + np.arange(n_in)) % len(allowed)].tolist()
            text, plen = exact_token_text(tok, ids, n_in, rng, allowed)
            yield Request(i, text, n_out, plen, cfg.ignore_eos)
        else:
            yield Request(i, f"{i} " + words_text(rng, n_in - 1), n_out, None, cfg.ignore_eos)


def prefix_stream(cfg: WorkloadConfig, tok: Tokenizer | None) -> Iterator[Request]:
    """`num_prefixes` shared prefixes, each request = one of them + a unique suffix."""
    if cfg.num_prefixes < 1 or cfg.prefix_len < 1:
        raise ValueError("the prefix workload needs --num-prefixes >= 1 and --prefix-len >= 1")
    rng = np.random.default_rng(cfg.seed)
    allowed = allowed_ids(tok) if tok is not None else None

    def text_of(n: int) -> str:
        if tok is not None and allowed is not None:
            ids = allowed[rng.integers(0, len(allowed), size=n)].tolist()
            return exact_token_text(tok, ids, n, rng, allowed)[0]
        return words_text(rng, n)

    prefixes = [text_of(cfg.prefix_len) for _ in range(cfg.num_prefixes)]
    for i in itertools.count():
        prompt = prefixes[int(rng.integers(0, cfg.num_prefixes))] + f" {i} " + text_of(
            cfg.suffix_len)
        plen = len(tok.encode(prompt)) if tok is not None else None
        yield Request(i, prompt, cfg.output_len, plen, cfg.ignore_eos)


def load_sharegpt(path: str) -> list[tuple[str, str, str | None]]:
    """(prompt, answer, user) per row with two turns; a row's optional `user` (a tenant or
    session id) is sent as the body's `user`, so session routing can be measured."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"ShareGPT file not found: {path}")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of rows with 'conversations'")

    def turn(t: object) -> str | None:
        return str(t["value"]) if isinstance(t, dict) and "value" in t else None

    pairs = []
    for d in data:  # rows of another shape are skipped, as vLLM's loader skips them
        turns = d.get("conversations") if isinstance(d, dict) else None
        if isinstance(turns, list) and len(turns) >= 2:
            q, a = turn(turns[0]), turn(turns[1])
            if q is not None and a is not None:
                pairs.append((q, a, None if d.get("user") is None else str(d["user"])))
    if not pairs:
        raise ValueError(f"{path} has no conversation with at least two turns")
    return pairs


def sharegpt_stream(cfg: WorkloadConfig, tok: Tokenizer | None) -> Iterator[Request]:
    if not cfg.dataset_path:
        raise ValueError("--workload sharegpt needs --dataset-path FILE.json")
    rows: list[tuple[str, int | None, int, str | None]] = []
    for prompt, answer, user in load_sharegpt(cfg.dataset_path):
        if tok is not None:
            plen, olen = len(tok.encode(prompt)), len(tok.encode(answer))
            if plen < 4 or olen < 4 or plen > 1024 or plen + olen > 2048:  # as vLLM filters
                continue
            rows.append((prompt, plen, olen, user))
        else:
            rows.append((prompt, None, max(4, round(len(answer.split()) * 1.3)), user))
    if not rows:
        raise ValueError(f"{cfg.dataset_path}: no conversation passes the length filter")
    order = np.random.default_rng(cfg.seed).permutation(len(rows)).tolist()
    for i, j in enumerate(itertools.cycle(order)):
        prompt, plen, olen, user = rows[j]
        yield Request(i, prompt, cfg.output_len if cfg.output_len > 0 else olen, plen,
                      cfg.ignore_eos, user=user)


def load_custom(path: str) -> list[tuple[str, int | None]]:
    """(prompt, output_tokens or None) per line of a JSONL file in the format `vllm bench serve
    --dataset-name custom` reads: {"prompt": "...", "output_tokens": 256}."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"dataset file not found: {path}")
    rows: list[tuple[str, int | None]] = []
    # a line at a time, split at line ends only (str.splitlines also splits at U+2028, U+0085
    # and others that JSON leaves unescaped inside a string)
    with p.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from e
            out = row.get("output_tokens") if isinstance(row, dict) else None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or not (
                    out is None or (type(out) is int and out > 0)):
                raise ValueError(f"{path}:{n}: expected {{\"prompt\": str, "
                                 "\"output_tokens\": int > 0 (optional)}")
            rows.append((row["prompt"], out))
    if not rows:
        raise ValueError(f"{path} has no prompts")
    return rows


def custom_stream(cfg: WorkloadConfig, tok: Tokenizer | None,
                  unique: bool = False) -> Iterator[Request]:
    """A JSONL file's prompts in a seeded order, cycling; each row's `output_tokens` (or
    --output-len where a row has none). `unique`: each behind a first line naming the run's
    seed and the request (`# request 7.42`), so fresh prompts are new even when the file
    cycles, and a sweep's later point (its own seed) never resends what an earlier one left in
    a cache (the repeat workload's fresh prompts)."""
    if not cfg.dataset_path:
        raise ValueError(f"--workload {cfg.name} needs --dataset-path FILE.jsonl")
    rows = load_custom(cfg.dataset_path)
    order = np.random.default_rng(cfg.seed).permutation(len(rows)).tolist()
    for i, j in enumerate(itertools.cycle(order)):
        prompt, out = rows[j]
        if unique:
            prompt = f"# request {cfg.seed}.{i}\n{prompt}"
        yield Request(i, prompt, out or cfg.output_len,
                      len(tok.encode(prompt)) if tok is not None else None, cfg.ignore_eos)


def repeat_stream(cfg: WorkloadConfig, tok: Tokenizer | None) -> Iterator[Request]:
    """Random prompts where a share `--repeat-ratio` of the requests resends an earlier request
    unchanged (prompt and max_tokens), chosen by Zipf popularity over the ones sent so far, the
    earliest the most popular: an exact-repeat mix whose ratio holds at any rate and length,
    where the cache workload's question pool (213 questions) runs dry at GPU rates. With
    --dataset-path the fresh prompts are a JSONL file's rows instead (`custom_stream`'s
    unique ones)."""
    rng = np.random.default_rng([cfg.seed, 1])  # its own stream: the fresh prompts stay random's
    ratio, s = float(cfg.cache.get("repeat", 0.3)), float(cfg.cache.get("zipf", 1.0))
    fresh = custom_stream(cfg, tok, unique=True) if cfg.dataset_path else random_stream(cfg, tok)
    sent: list[Request] = []
    texts: set[bytes] = set()  # a fresh prompt must be new: token runs can decode alike
    for i in itertools.count():
        if sent and rng.random() < ratio:
            first = sent[zipf_pick(rng, list(range(len(sent))), s)]
            yield dataclasses.replace(first, index=i, kind="repeat")
            continue
        req = next(fresh)
        while (digest := hashlib.blake2b(req.prompt.encode(), digest_size=16).digest()) in texts:
            req = next(fresh)
        texts.add(digest)
        new = dataclasses.replace(req, index=i, canonical_id=f"p{i}", kind="new")
        sent.append(new)
        yield new


def stream(cfg: WorkloadConfig, tok: Tokenizer | None) -> Iterator[Request]:
    """The workload's requests; bad settings raise ValueError here, not on first use."""
    it: Iterator[Request]
    if cfg.name == "random":
        it = random_stream(cfg, tok)
    elif cfg.name == "prefix":
        it = prefix_stream(cfg, tok)
    elif cfg.name == "sharegpt":
        it = sharegpt_stream(cfg, tok)
    elif cfg.name == "cache":
        it = cache_stream(cfg)
    elif cfg.name == "repeat":
        it = repeat_stream(cfg, tok)
    elif cfg.name == "custom":
        it = custom_stream(cfg, tok)
    else:
        raise ValueError(f"unknown workload {cfg.name!r}")
    return itertools.chain([next(it)], it)


def warmup_requests(n: int, max_tokens: int) -> list[Request]:
    return [Request(-1 - i, f"Warm-up request {i}: say hello.", max_tokens) for i in range(n)]
