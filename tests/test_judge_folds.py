"""The out-of-fold teacher (tools/judge/folds.py): folds by family, and a merged teacher file
whose every train logit comes from the teacher that did not train on that pair."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from tools.judge import distil, folds
from tools.judge.train import load


def rows(n: int, families: int, tag: str) -> list[dict[str, Any]]:
    return [{"a": f"{tag} question {i}", "b": f"{tag} other {i}", "same": i % 3 == 0,
             "kind": "paraphrase", "domain": "t", "family": f"{tag}{i % families}"}
            for i in range(n)]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    folds.write_jsonl(root / "train.jsonl", rows(40, 9, "tr"))
    folds.write_jsonl(root / "dev.jsonl", rows(10, 4, "dv"))
    return root


def fake_teacher(path: Path, splits: dict[str, list[dict[str, Any]]],
                 logit: Any) -> None:
    """A teacher file whose logit of a pair is `logit(pair)` (and minus it read backwards)."""
    path.write_bytes(orjson.dumps({"source": {}, "splits": {
        name: {"fingerprint": distil.fingerprint(ps), "pairs": len(ps),
               "ab": [logit(p) for p in ps], "ba": [-logit(p) for p in ps]}
        for name, ps in splits.items()}}))


def own(pair: dict[str, Any], fold: int) -> int:
    return 1000 * (fold + 1) + int(pair["a"].split()[-1])


def test_folds_split_by_family_and_cover_train_once(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "folds"
    folds.main(["split", str(data), str(out), "--k", "3", "--seed", "4"])
    train = load(data / "train.jsonl")
    seen: list[str] = []
    for i in range(3):
        fold = out / f"fold{i}"
        trains, scores = load(fold / "train.jsonl"), load(fold / "dev.jsonl")
        assert not {p["family"] for p in trains} & {p["family"] for p in scores}
        assert len(trains) + len(scores) == len(train) and scores
        assert scores == [p for p in train if p in scores]  # train's order kept
        seen += [p["a"] for p in scores]
    assert sorted(seen) == sorted(p["a"] for p in train)  # each pair scored by exactly one fold
    assert not (out / "fold0" / "test.jsonl").exists()


def test_merge_takes_each_pair_from_the_teacher_that_never_saw_it(data: Path,
                                                                  tmp_path: Path) -> None:
    out = tmp_path / "folds"
    folds.split(data, out, 2, 0)
    plan = orjson.loads((out / "folds.json").read_bytes())
    for i in range(2):
        mine = load(out / f"fold{i}" / "train.jsonl"), load(out / f"fold{i}" / "dev.jsonl")
        # teacher i says 1000 * (i + 1) + the pair's number of the pairs it scored out of fold,
        # 50 of those it trained on
        fake_teacher(out / f"fold{i}" / "teacher.json", {"train": mine[0], "dev": mine[1]},
                     lambda p, i=i, mine=mine: own(p, i) if p in mine[1] else 50)
    train, dev = load(data / "train.jsonl"), load(data / "dev.jsonl")
    fake_teacher(tmp_path / "full.json", {"train": train, "dev": dev},
                 lambda p: 7 if p in dev else 1)
    merged = tmp_path / "oof.json"
    folds.main(["merge", str(data), str(out), "--dev-teacher", str(tmp_path / "full.json"),
                "--out", str(merged)])
    got = distil.read_teacher(merged, train)  # accepted as a teacher of train as it is
    assert got == [(own(p, plan["fold"][p["family"]]), -own(p, plan["fold"][p["family"]]))
                   for p in train]
    assert distil.read_teacher(merged, dev, "dev") == [(7, -7)] * len(dev)


def test_merge_refuses_folds_of_another_corpus(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "folds"
    folds.split(data, out, 2, 0)
    changed = load(data / "train.jsonl")
    changed[0]["same"] = not changed[0]["same"]
    folds.write_jsonl(data / "train.jsonl", changed)
    with pytest.raises(SystemExit, match=r"another train\.jsonl"):
        folds.main(["merge", str(data), str(out), "--dev-teacher", str(tmp_path / "x.json"),
                    "--out", str(tmp_path / "oof.json")])


def test_merge_refuses_a_fold_that_scored_other_pairs(data: Path, tmp_path: Path) -> None:
    out = tmp_path / "folds"
    folds.split(data, out, 2, 0)
    train, dev = load(data / "train.jsonl"), load(data / "dev.jsonl")
    fake_teacher(tmp_path / "full.json", {"train": train, "dev": dev}, lambda p: 1)
    fake_teacher(out / "fold0" / "teacher.json", {"dev": load(out / "fold0" / "dev.jsonl")},
                 lambda p: 1)
    fake_teacher(out / "fold1" / "teacher.json", {"dev": load(out / "fold0" / "dev.jsonl")},
                 lambda p: 1)  # fold 0's pairs, not its own
    with pytest.raises(SystemExit, match="other pairs"):
        folds.main(["merge", str(data), str(out), "--dev-teacher", str(tmp_path / "full.json"),
                    "--out", str(tmp_path / "oof.json")])
    plan = orjson.loads((out / "folds.json").read_bytes())
    plan["fold"].pop(sorted(plan["fold"])[0])
    (out / "folds.json").write_bytes(orjson.dumps(plan))
    with pytest.raises(SystemExit, match="other families"):
        folds.main(["merge", str(data), str(out), "--dev-teacher", str(tmp_path / "full.json"),
                    "--out", str(tmp_path / "oof.json")])
