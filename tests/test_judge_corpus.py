"""The judge's labelled pairs: committed, reproducible, split by family."""

from __future__ import annotations

from pathlib import Path

import orjson

from tools.judge.corpus import build

DATA = Path(__file__).resolve().parent / "data" / "judge"
KINDS = {"paraphrase", "negation", "entity", "number", "unit", "version", "direction", "role",
         "scope", "task", "payload", "constraint", "time", "modality"}
DOMAINS = {"coding", "devops", "science", "geography", "history", "cooking", "health",
           "finance", "writing", "support", "translation"}


def test_committed_splits_are_what_the_seeded_generator_writes() -> None:
    built = build(11)
    for name, pairs in built.items():
        committed = [orjson.loads(line) for line in (DATA / f"{name}.jsonl").read_bytes()
                     .splitlines()]
        assert committed == pairs, name


def test_splits_are_big_disjoint_by_family_and_cover_every_kind_and_domain() -> None:
    built = build(11)
    assert sum(len(p) for p in built.values()) >= 3000
    families = {name: {p["family"] for p in pairs} for name, pairs in built.items()}
    assert not families["train"] & families["dev"]
    assert not families["train"] & families["test"]
    assert not families["dev"] & families["test"]
    everything = [p for pairs in built.values() for p in pairs]
    assert {p["kind"] for p in everything} >= KINDS
    assert {p["domain"] for p in everything} == DOMAINS
    for pairs in built.values():
        same = sum(p["same"] for p in pairs)
        assert 0.35 < same / len(pairs) < 0.65
        assert all(p["a"].lower() != p["b"].lower() for p in pairs)
