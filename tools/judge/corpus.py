"""python -m tools.judge.corpus [--out tests/data/judge] [--seed 11]

Writes the labelled pairs for the cache's judge: train.jsonl, dev.jsonl, test.jsonl. Each line:
{"a", "b", "same", "kind", "domain", "family"}. A family is a generated frame (all its
instances) or one hand-written seed family, and every family lands in exactly one split, so
dev and test hold whole templates and topics that training never saw. Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from tools.judge.frame import Frame, edited, pick_values, render
from tools.judge.frames_tech import FRAMES as TECH
from tools.judge.frames_world import FRAMES as WORLD
from tools.judge.seeds import SEEDS, Seed

Pair = dict[str, Any]
FAMILIES = Path(__file__).with_name("families")  # helper-written families, one JSON per line
DOMAINS = frozenset({"coding", "devops", "science", "geography", "history", "cooking", "health",
                     "finance", "writing", "support", "translation"})
KINDS = frozenset({"negation", "entity", "number", "unit", "version", "time", "direction", "role",
                   "scope", "task", "payload", "constraint", "modality"})
PREFIXES = ("quick question: ", "hey, ", "pls help - ", "so ", "hi! ", "question: ", "ok so ")
SUFFIXES = (" thanks", " ??", " pls", " (asking for a friend)", " thx", "!")
INSTANCES = 28  # per frame


def informal(text: str, rng: random.Random) -> str:
    """Noise that never changes the answer, applied to both labels alike."""
    if rng.random() < 0.3:
        text = text.lower()
    if rng.random() < 0.25:
        text = text.rstrip("?.!")
    if rng.random() < 0.15:
        text = rng.choice(PREFIXES) + text
    if rng.random() < 0.15:
        text = text + rng.choice(SUFFIXES)
    return text


def _pair(a: str, b: str, same: bool, kind: str, domain: str, family: str,
          rng: random.Random) -> Pair:
    a, b = informal(a, rng), informal(b, rng)
    if rng.random() < 0.5:
        a, b = b, a
    return {"a": a, "b": b, "same": same, "kind": kind, "domain": domain, "family": family}


_HOW = re.compile(r"^(?:how do i|how can i|how to|how should i|what's the way to|"
                  r"is it possible to|can i) (.+?)[?.!]*$", re.IGNORECASE)
ASKS = {  # one intent each: the forms within a group are paraphrases of each other
    "how": ("How do I {x}?", "how can I {x}", "what's the way to {x}?", "steps to {x}?"),
    "should": ("Should I {x}?", "is it a good idea to {x}", "is it wise to {x}?"),
    "can": ("Is it possible to {x}?", "can I {x}? is that allowed", "am I able to {x}?"),
    "why": ("Why would I {x}?", "what's the point of trying to {x}", "why would anyone {x}?"),
    "risk": ("What happens if I {x}?", "what are the consequences if I {x}",
             "what could go wrong if I {x}?"),
}


def intent_pairs(pairs: list[Pair], rng: random.Random, n: int) -> list[Pair]:
    """Same action, another intent (how vs should vs can vs why vs what-if): different answers;
    the same intent said another way: the same answer. Built from any how-to question."""
    out: list[Pair] = []
    texts = sorted({t for p in pairs for t in (p["a"], p["b"])})
    rng.shuffle(texts)
    for text in texts[:n]:
        m = _HOW.match(text)
        if m is None:
            continue
        x = m.group(1)
        p0 = next(p for p in pairs if text in (p["a"], p["b"]))
        first, second = rng.sample(sorted(ASKS), 2)
        a, b = rng.sample(ASKS[first], 2)
        out.append(_pair(a.format(x=x), b.format(x=x), True, "paraphrase", p0["domain"],
                         p0["family"], rng))
        kind = "modality" if {first, second} <= {"how", "should", "can"} else "task"
        out.append(_pair(rng.choice(ASKS[first]).format(x=x),
                         rng.choice(ASKS[second]).format(x=x), False, kind, p0["domain"],
                         p0["family"], rng))
    return out


def frame_pairs(frame: Frame, rng: random.Random) -> list[Pair]:
    out: list[Pair] = []
    for _ in range(INSTANCES):
        values = pick_values(frame, rng)
        for _ in range(3):
            t1, t2 = rng.sample(frame.templates, 2)
            out.append(_pair(render(t1, values, rng), render(t2, values, rng), True,
                             "paraphrase", frame.domain, frame.name, rng))
        base = render(rng.choice(frame.templates), values, rng)
        for contrast in frame.contrasts:
            if contrast.op == "suffix":
                other = render(rng.choice(frame.templates), values, rng).rstrip("?.") + " " + \
                    rng.choice(contrast.args)
            elif contrast.op == "alt":
                other = render(rng.choice(contrast.args), values, rng)
                if contrast.para and len(contrast.args) > 1 and rng.random() < 0.4:
                    t1, t2 = rng.sample(contrast.args, 2)
                    out.append(_pair(render(t1, values, rng), render(t2, values, rng), True,
                                     "paraphrase", frame.domain, frame.name, rng))
            else:
                changed = edited(frame, contrast, values, rng)
                if changed is None:
                    continue
                other = render(rng.choice(frame.templates), changed, rng)
            out.append(_pair(base, other, False, contrast.kind, frame.domain, frame.name, rng))
    return out


def written_families(folder: Path = FAMILIES) -> list[tuple[str, Seed]]:
    """The families in folder/*.jsonl: {"family", "domain", "same": [...], "contrasts":
    [[kind, question], ...]}; a malformed line stops the build with its file and line."""
    out: list[tuple[str, Seed]] = []
    names: set[str] = set()
    for path in sorted(folder.glob("*.jsonl")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            f = orjson.loads(line)
            where = f"{path.name}:{n}"
            if f["domain"] not in DOMAINS:
                raise SystemExit(f"{where}: unknown domain {f['domain']!r}")
            if len(f["same"]) < 2 or f["family"] in names:
                raise SystemExit(f"{where}: fewer than two paraphrases, or a repeated name")
            bad = [k for k, _ in f["contrasts"] if k not in KINDS]
            if bad:
                raise SystemExit(f"{where}: unknown kinds {bad}")
            names.add(f["family"])
            out.append((f["family"], (f["domain"], tuple(f["same"]),
                                      tuple((k, q) for k, q in f["contrasts"]))))
    return out


def seed_pairs(family: str, seed: Seed, rng: random.Random) -> list[Pair]:
    domain, same, contrasts = seed
    out = [_pair(a, b, True, "paraphrase", domain, family, rng)
           for a, b in itertools.combinations(same, 2)]
    out.extend(_pair(a, other, False, kind, domain, family, rng)
               for kind, other in contrasts for a in rng.sample(same, min(2, len(same))))
    return out


def topic_pairs(pairs: list[Pair], rng: random.Random, n: int) -> list[Pair]:
    """Different questions of one domain and split: the easy negatives."""
    out: list[Pair] = []
    by_domain: dict[str, list[Pair]] = {}
    for p in pairs:
        by_domain.setdefault(p["domain"], []).append(p)
    for _ in range(n):
        group = by_domain[rng.choice(sorted(by_domain))]
        x, y = rng.sample(group, 2)
        if x["family"] != y["family"]:
            out.append({**_pair(x["a"], y["b"], False, "topic", x["domain"], x["family"], rng)})
    return out


def written_split(family: str, seed: int) -> str:
    """1/5 test, 1/5 dev, 3/5 train, from a hash of the family's name and the seed."""
    digest = hashlib.sha256(f"{seed}:{family}".encode()).digest()
    return ("test", "dev", "train", "train", "train")[int.from_bytes(digest[:8], "big") % 5]


def build(seed: int, folder: Path = FAMILIES) -> dict[str, list[Pair]]:
    rng = random.Random(seed)
    frames = [(frame.name, frame_pairs(frame, rng)) for frame in (*TECH, *WORLD)]
    seeds = [(f"seed{i:02d}", seed_pairs(f"seed{i:02d}", s, rng)) for i, s in enumerate(SEEDS)]
    written = [(name, seed_pairs(name, s, rng)) for name, s in written_families(folder)]
    splitter = random.Random(seed)  # its own stream: editing a family moves no other family
    splits: dict[str, list[tuple[str, list[Pair]]]] = {"test": [], "dev": [], "train": []}
    for group in (frames, seeds):  # each group split 1/5 test, 1/5 dev, 3/5 train
        splitter.shuffle(group)
        n = len(group) // 5
        splits["test"] += group[:n]
        splits["dev"] += group[n:2 * n]
        splits["train"] += group[2 * n:]
    for name, pairs in written:  # by its name alone: a new file moves no family already split
        splits[written_split(name, seed)].append((name, pairs))
    out: dict[str, list[Pair]] = {}
    for name, fams in splits.items():
        pairs = [p for _, ps in fams for p in ps]
        pairs += topic_pairs(pairs, rng, len(pairs) // 12) + intent_pairs(pairs, rng,
                                                                           len(pairs) // 3)
        seen: set[tuple[str, str]] = set()
        unique = []
        for p in pairs:
            key = (p["a"].lower(), p["b"].lower())
            if p["a"].lower() != p["b"].lower() and key not in seen and key[::-1] not in seen:
                seen.add(key)
                unique.append(p)
        rng.shuffle(unique)
        out[name] = unique
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.judge.corpus")
    parser.add_argument("--out", type=Path, default=Path("tests/data/judge"))
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, pairs in build(args.seed).items():
        (args.out / f"{name}.jsonl").write_bytes(b"".join(orjson.dumps(p) + b"\n" for p in pairs))
        kinds = Counter(p["kind"] for p in pairs)
        same = sum(p["same"] for p in pairs)
        fams = len({p["family"] for p in pairs})
        print(f"{name}: {len(pairs)} pairs, {same} same, {fams} families, {dict(kinds)}")


if __name__ == "__main__":
    main()
