"""python -m tools.judge.corpus [--out tests/data/judge] [--seed 11]

Writes the labelled pairs for the cache's judge: train.jsonl, dev.jsonl, test.jsonl. Each line:
{"a", "b", "same", "kind", "domain", "family"}. A family is a generated frame (all its
instances) or one hand-written seed family, and every family lands in exactly one split, so
dev and test hold whole templates and topics that training never saw. Deterministic for a seed.

A pair that one of the rules below leaves out (a topic pair between families that ask the same
question, a can-vs-how intent pair, a direction contrast on a symmetric relation) is still drawn
and dropped at the end (DROP), and the keyword and chat rewrites draw from their own streams, so
leaving one out moves no other pair: the files change by exactly the pairs the rules concern.
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
from tools.judge.rewrite import PREFIXES, SUFFIXES, content_words, rewrite, strip_noise
from tools.judge.seeds import SEEDS, Seed

Pair = dict[str, Any]
FAMILIES = Path(__file__).with_name("families")  # helper-written families, one JSON per line
DOMAINS = frozenset({"coding", "devops", "science", "geography", "history", "cooking", "health",
                     "finance", "writing", "support", "translation"})
KINDS = frozenset({"negation", "entity", "number", "unit", "version", "time", "direction", "role",
                   "scope", "task", "payload", "constraint", "modality"})
INSTANCES = 28  # per frame
DROP = "_drop"  # a pair drawn, then left out (see the module's docstring)
LATE = "_late"  # a pair from a side stream, added after the split's other draws
LINKED = 0.6  # two families whose questions' content words overlap this much ask one question
OPEN_KINDS = frozenset({"scope", "constraint", "unit"})  # contrasts that add a detail
REWRITE_SAME, REWRITE_DIFF = 0.3, 0.15  # the share of a family's pairs given a rewritten twin
_SYMMETRIC = re.compile(r"\b(?:vs\.?|versus|or|compare[ds]?|comparing|comparison|differen\w*|"
                        r"same|equal\w*|equivalent|identical|similar\w*|alike|interchangeabl\w*|"
                        r"between|distance|far)\b", re.IGNORECASE)
_DIRECTED = re.compile(r"\bthan\b", re.IGNORECASE)


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
    the same intent said another way: the same answer. Built from any how-to question. Not
    "can I X?" against "how do I X?": whoever asks whether they can do something wants to know
    how (one answer, "yes: ...", serves both), so that pair is left out (DROP), neither
    different nor, since "is that allowed" may ask about permission, the same."""
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
        other = _pair(rng.choice(ASKS[first]).format(x=x), rng.choice(ASKS[second]).format(x=x),
                      False, kind, p0["domain"], p0["family"], rng)
        if {first, second} == {"how", "can"}:
            other[DROP] = True
        out.append(other)
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


def terse(text: str) -> bool:
    """Keyword style: at most 6 content words, and at most 1 word in 5 a function word."""
    words = re.findall(r"[a-z0-9][a-z0-9'+#]*", strip_noise(text).lower())
    content = content_words(text)
    return len(content) <= 6 and len(words) - len(content) <= 0.2 * len(words)


def symmetric(text: str) -> bool:
    """The text states a relation without a direction: "A vs B", "which is faster, A or B",
    "are A and B the same", "the difference between A and B" (and no "than")."""
    return bool(_SYMMETRIC.search(text)) and not _DIRECTED.search(text)


def partners(kind: str, other: str, same: tuple[str, ...]) -> list[str]:
    """The paraphrases a contrast may be paired with as a negative.

    direction: none when the contrast only swaps the sides of a symmetric relation ("are B and
    A the same?" for "are A and B the same?": the same question); otherwise every paraphrase
    that has a direction itself when the contrast is a comparison ("js vs python speed" has
    none, so "Is Python faster than JS?" is not its opposite). scope, constraint, unit (a
    contrast that adds or changes a detail): no terse, keyword-style paraphrase ("check ssl
    cert expiry openssl"), which leaves such a detail open and so would be the negative
    partner of one reading of itself."""
    if kind == "direction":
        if symmetric(other) and content_words(other) <= frozenset().union(
                *(content_words(s) for s in same)):
            return []
        if _DIRECTED.search(other):
            return [s for s in same if not symmetric(s)]
    elif kind in OPEN_KINDS:
        return [s for s in same if not terse(s)]
    return list(same)


def seed_pairs(family: str, seed: Seed, rng: random.Random, stream: int = 0) -> list[Pair]:
    """The paraphrases pairwise (same) and each contrast against two of them (different). A
    drawn partner that `partners` refuses is dropped (DROP) and, where an allowed one is left,
    replaced by a pair drawn from the family's own stream (LATE: added after the split's other
    draws, so the replacement moves no other pair; stream is the corpus seed)."""
    domain, same, contrasts = seed
    out = [_pair(a, b, True, "paraphrase", domain, family, rng)
           for a, b in itertools.combinations(same, 2)]
    side: random.Random | None = None
    for kind, other in contrasts:
        allowed = partners(kind, other, same)
        picks = rng.sample(same, min(2, len(same)))
        spare = [s for s in allowed if s not in picks]
        for a in picks:
            pair = _pair(a, other, False, kind, domain, family, rng)
            out.append(pair)
            if a in allowed:
                continue
            pair[DROP] = True
            if spare:
                side = side or random.Random(f"{stream}:{family}")
                late = _pair(spare.pop(0), other, False, kind, domain, family, side)
                late[LATE] = True
                out.append(late)
    return out


class _Questions:
    """Each family's questions as content-word sets, to tell whether two families ask one
    question somewhere (some two of their texts overlap >= LINKED, Jaccard)."""

    def __init__(self, pairs: list[Pair]) -> None:
        self.keys: dict[str, set[frozenset[str]]] = {}
        for p in pairs:
            for t in (p["a"], p["b"]):
                self.keys.setdefault(p["family"], set()).add(content_words(t))
        self.index: dict[str, dict[str, list[frozenset[str]]]] = {}
        for family, keys in self.keys.items():
            index = self.index.setdefault(family, {})
            for key in keys:
                for word in key:
                    index.setdefault(word, []).append(key)
        self.known: dict[tuple[str, str], bool] = {}

    def linked(self, f: str, g: str) -> bool:
        if (f, g) not in self.known:
            if len(self.keys[f]) > len(self.keys[g]):
                f, g = g, f
            index = self.index[g]
            self.known[f, g] = self.known[g, f] = any(
                len(key & other) >= LINKED * len(key | other)
                for key in self.keys[f] if key
                for other in {o for w in key for o in index.get(w, ())})
        return self.known[f, g]


def topic_pairs(pairs: list[Pair], rng: random.Random, n: int) -> list[Pair]:
    """Different questions of one domain and split: the easy negatives. Not when the two texts
    share a content word, nor between two families that ask one question somewhere (written
    families and frame instances repeat each other: "enable 2FA on my Instagram account" is a
    frame instance and a written family); such a draw is dropped (DROP)."""
    out: list[Pair] = []
    by_domain: dict[str, list[Pair]] = {}
    for p in pairs:
        by_domain.setdefault(p["domain"], []).append(p)
    questions = _Questions(pairs)
    for _ in range(n):
        group = by_domain[rng.choice(sorted(by_domain))]
        x, y = rng.sample(group, 2)
        if x["family"] != y["family"]:
            pair = _pair(x["a"], y["b"], False, "topic", x["domain"], x["family"], rng)
            if content_words(x["a"]) & content_words(y["b"]) \
                    or questions.linked(x["family"], y["family"]):
                pair[DROP] = True
            out.append(pair)
    return out


def rewritten(pairs: list[Pair], seed: int) -> list[Pair]:
    """Keyword and chat twins (tools.judge.rewrite) of a share of each family's pairs: one side
    rewritten, the same label and kind (a rewrite asks what its text asks). From each family's
    own stream, so they move no other pair. No twin of a scope, constraint or unit contrast
    with a terse side: like a terse paraphrase (`partners`), it leaves the detail open
    ('marshall plan' is no negative of 'Explain the Marshall Plan in one sentence')."""
    out: list[Pair] = []
    streams: dict[str, random.Random] = {}
    for p in pairs:
        if p["kind"] == "topic":
            continue
        rng = streams.setdefault(p["family"], random.Random(f"{seed}:rewrite:{p['family']}"))
        if rng.random() >= (REWRITE_SAME if p["same"] else REWRITE_DIFF):
            continue
        a, b = strip_noise(p["a"]), strip_noise(p["b"])
        if rng.random() < 0.5:
            a, b = b, a
        short = rewrite(a, rng)
        if short is not None and p["kind"] in OPEN_KINDS and (terse(short) or terse(b)):
            continue  # a terse form leaves open the detail the contrast adds (see partners)
        if short is not None and short.lower() != b.lower():
            out.append(_pair(short, b, p["same"], p["kind"], p["domain"], p["family"], rng))
    return out


def written_split(family: str, seed: int) -> str:
    """1/5 test, 1/5 dev, 3/5 train, from a hash of the family's name and the seed."""
    digest = hashlib.sha256(f"{seed}:{family}".encode()).digest()
    return ("test", "dev", "train", "train", "train")[int.from_bytes(digest[:8], "big") % 5]


def build(seed: int, folder: Path = FAMILIES) -> dict[str, list[Pair]]:
    rng = random.Random(seed)
    frames = [(frame.name, frame_pairs(frame, rng)) for frame in (*TECH, *WORLD)]
    seeds = [(f"seed{i:02d}", seed_pairs(f"seed{i:02d}", s, rng, seed))
             for i, s in enumerate(SEEDS)]
    written = [(name, seed_pairs(name, s, rng, seed)) for name, s in written_families(folder)]
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
        drawn = [p for _, ps in fams for p in ps]
        pairs = [p for p in drawn if LATE not in p]
        pairs += topic_pairs(pairs, rng, len(pairs) // 12) + intent_pairs(pairs, rng,
                                                                           len(pairs) // 3)
        seen: set[tuple[str, str]] = set()
        unique = [p for p in pairs if _new(p, seen)]
        rng.shuffle(unique)
        kept = [p for p in unique if DROP not in p]
        late = [p for p in drawn if LATE in p]
        late += rewritten([p for p in kept if p["kind"] != "topic"], seed)
        place = random.Random(f"{seed}:place:{name}")  # late pairs go in among the others
        for p in late:
            if _new(p, seen):
                p.pop(LATE, None)
                kept.insert(place.randrange(len(kept) + 1), p)
        out[name] = kept
    return out


def _new(p: Pair, seen: set[tuple[str, str]]) -> bool:
    """p is not a pair of one text, nor already in seen (either order, any case); adds it."""
    key = (p["a"].lower(), p["b"].lower())
    if key[0] == key[1] or key in seen or key[::-1] in seen:
        return False
    seen.add(key)
    return True


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
