"""The judge's labelled pairs: committed, reproducible, split by family."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import cast

import orjson
import pytest

from tools.judge.corpus import build, written_split
from tools.judge.rewrite import strip_noise

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


def written(folder: Path, lines: list[dict[str, object]]) -> Path:
    folder.mkdir()
    (folder / "a.jsonl").write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    return folder


def family(name: str, **over: object) -> dict[str, object]:
    return {"family": name, "domain": "cooking", **over,
            "same": over.get("same", [f"How long do I bake {name} bread?",
                                      f"{name} bread: oven time?",
                                      f"baking time for a {name} loaf"]),
            "contrasts": over.get("contrasts", [["unit", f"{name} bread bake time in hours?"],
                                                ["negation", f"bake {name} bread without yeast"]])}


def test_written_families_land_whole_in_one_split(tmp_path: Path) -> None:
    names = [f"w{i}" for i in range(10)]
    built = build(11, written(tmp_path / "f", [family(n) for n in names]))
    where = {n: {s for s, pairs in built.items() for p in pairs if p["family"] == n}
             for n in names}
    assert all(len(splits) == 1 for splits in where.values())
    assert {n: splits.pop() for n, splits in where.items()} == {
        n: written_split(n, 11) for n in names}
    w0 = [p for pairs in built.values() for p in pairs if p["family"] == "w0"]
    def norm(text: str) -> str:
        return strip_noise(text).lower().rstrip("?.! ")

    same = [norm(str(t)) for t in cast(list[object], family("w0")["same"])]
    positives = {frozenset((norm(p["a"]), norm(p["b"]))) for p in w0 if p["same"]}
    assert {frozenset(c) for c in itertools.combinations(same, 2)} <= positives  # pairwise
    assert all(p["same"] == (p["kind"] == "paraphrase") for p in w0)  # + keyword/chat twins
    assert {p["kind"] for p in w0 if not p["same"]} >= {"unit", "negation"}


def test_a_new_file_of_families_moves_no_family_already_split(tmp_path: Path) -> None:
    def splits(folder: Path) -> dict[str, str]:
        return {p["family"]: name for name, pairs in build(11, folder).items() for p in pairs
                if p["family"].startswith("w")}

    before = splits(written(tmp_path / "a", [family(f"w{i}") for i in range(40)]))
    after = splits(written(tmp_path / "b", [family(f"w{i}") for i in range(60)]))
    assert {n: after[n] for n in before} == before
    shares = [written_split(f"f{i}", 11) for i in range(5000)]
    assert 0.17 < shares.count("test") / 5000 < 0.23 and 0.17 < shares.count("dev") / 5000 < 0.23


def test_a_malformed_family_stops_the_build_with_its_place(tmp_path: Path) -> None:
    for bad, said in ((family("x", domain="sports"), "a.jsonl:2: unknown domain"),
                      (family("x", contrasts=[["opposite", "q"]]), "unknown kinds"),
                      (family("x", same=["only one"]), "fewer than two"),
                      (family("ok"), "repeated name")):
        folder = tmp_path / str(id(bad))
        with pytest.raises(SystemExit, match=said):
            build(11, written(folder, [family("ok"), bad]))
