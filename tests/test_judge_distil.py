"""Distilling the judge (tools/judge/distil.py, sweep --teacher / --teacher-out): the loss, the
teacher file, and the whole path end to end on a tiny random BERT (CPU, seconds)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from tools.judge import distil, sweep
from tools.judge.train import batch_of, distil_loss

torch = pytest.importorskip("torch")

WORDS = ("reset my password", "install python on windows", "convert 5 miles to km",
         "weather in paris tomorrow", "sort a list in python", "cancel my subscription")


def pairs(n: int, shift: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        a = WORDS[(i + shift) % len(WORDS)]
        same = i % 2 == 0
        b = f"how do i {a}" if same else WORDS[(i + shift + 1) % len(WORDS)]
        out.append({"a": a, "b": b, "same": same, "kind": "paraphrase", "domain": "t",
                    "family": f"f{i}"})
    return out


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 1-layer, 16-wide random BERT with the embedder's tokenizer, and a data folder of 12
    train and 8 dev pairs."""
    from transformers import BertConfig, BertModel

    from proxy.cache.embedder import default_model_path

    root = tmp_path_factory.mktemp("distil")
    base = root / "tiny-bert"
    torch.manual_seed(0)
    BertModel(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(base)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        if (Path(default_model_path()) / name).exists():
            shutil.copy(Path(default_model_path()) / name, base / name)
    data = root / "data"
    data.mkdir()
    for name, rows in (("train", pairs(12, 0)), ("dev", pairs(8, 3))):
        (data / f"{name}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return base, data


def run_sweep(base: Path, data: Path, out: Path, *extra: str) -> list[float]:
    torch.set_num_threads(1)
    sweep.main(["--base", str(base), "--data", str(data), "--out", str(out), "--device", "cpu",
                "--variants", "2/3e-2/mean/7/4", *extra])
    scores: dict[str, list[float]] = orjson.loads((out / "dev_scores.json").read_bytes())
    return scores["2/3e-2/mean/7/4"]


def test_the_soft_term_pulls_the_student_to_the_teacher_not_to_the_labels() -> None:
    t = torch.tensor([3.0, -2.0, 0.5, -6.0])
    y = torch.tensor([1.0, 1.0, 0.0, 0.0])
    for temperature in (1.0, 2.0, 4.0):
        s = t.clone().requires_grad_(True)  # the student already says what the teacher says
        distil_loss(s, y, t, alpha=1.0, temperature=temperature).backward()
        assert s.grad is not None and torch.allclose(s.grad, torch.zeros(4), atol=1e-7)
        # ... whatever the labels: at alpha 1 they are not read
        assert distil_loss(t, y, t, 1.0, temperature) == distil_loss(t, 1 - y, t, 1.0,
                                                                     temperature)
    s = torch.zeros(4, requires_grad=True)
    distil_loss(s, y, t, alpha=1.0, temperature=1.0).backward()
    assert s.grad is not None  # d/ds BCE(s, sigmoid(t)) = (sigmoid(s) - sigmoid(t)) / n
    assert torch.allclose(s.grad, (torch.sigmoid(s) - torch.sigmoid(t)).detach() / 4)
    plain = torch.nn.functional.binary_cross_entropy_with_logits(torch.zeros(4), y)
    assert distil_loss(torch.zeros(4), y) == plain  # no teacher: the labels' BCE
    assert distil_loss(torch.zeros(4), y, t, alpha=0.0) == plain
    half = distil_loss(torch.zeros(4), y, t, 0.5, 2.0)
    soft = distil_loss(torch.zeros(4), y, t, 1.0, 2.0)
    assert torch.isclose(half, (soft + plain) / 2)


def test_each_pair_gets_the_teacher_logit_of_the_order_it_is_read_in() -> None:
    rows = pairs(3, 0)
    firsts, seconds, labels, soft = batch_of(rows, [2, 0], [True, False],
                                             [(1.0, -1.0), (2.0, -2.0), (3.0, -3.0)])
    assert firsts == [rows[2]["b"], rows[0]["a"]] and seconds == [rows[2]["a"], rows[0]["b"]]
    assert labels == [1.0, 1.0] and soft == [-3.0, 1.0]
    assert batch_of(rows, [1], [False])[3] is None


def test_a_teacher_file_of_other_pairs_is_refused(tmp_path: Path) -> None:
    train = pairs(4, 0)
    doc = {"source": {}, "splits": {"train": {
        "fingerprint": distil.fingerprint(train), "pairs": 4, "ab": [1, 2, 3, 4],
        "ba": [5, 6, 7, 8]}}}
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(doc))
    assert distil.read_teacher(path, train) == [(1, 5), (2, 6), (3, 7), (4, 8)]
    moved = [dict(p) for p in train]
    moved[1]["same"] = not moved[1]["same"]  # a relabelled pair is another corpus
    with pytest.raises(ValueError, match="other pairs"):
        distil.read_teacher(path, moved)
    with pytest.raises(ValueError, match="other pairs"):
        distil.read_teacher(path, train[::-1])
    with pytest.raises(ValueError, match="no dev"):
        distil.read_teacher(path, train, "dev")


def test_distillation_end_to_end_on_a_tiny_bert(tiny: tuple[Path, Path], tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    base, data = tiny
    # the teacher: a sweep that writes its logits of every train and dev pair, both orders
    teacher_file = tmp_path / "teacher.json"
    teacher_dev = run_sweep(base, data, tmp_path / "teacher", "--teacher-out", str(teacher_file))
    doc = orjson.loads(teacher_file.read_bytes())
    assert set(doc["splits"]) == {"train", "dev"}
    assert [len(doc["splits"][s]["ba"]) for s in ("train", "dev")] == [12, 8]
    assert doc["splits"]["dev"]["ab"] == pytest.approx(teacher_dev, abs=2e-4)
    assert doc["splits"]["train"]["ab"] != doc["splits"]["train"]["ba"]  # order is read
    # the same file from the saved half-precision weights (tools.judge.distil's CLI)
    again = tmp_path / "again.json"
    distil.main(["--base", str(base), "--weights", str(tmp_path / "teacher" / "best.pt"),
                 "--data", str(data), "--teacher-out", str(again), "--device", "cpu"])
    redo = orjson.loads(again.read_bytes())["splits"]
    for split in ("train", "dev"):
        for order in ("ab", "ba"):
            assert redo[split][order] == pytest.approx(doc["splits"][split][order], abs=0.02)

    plain = run_sweep(base, data, tmp_path / "plain")
    capsys.readouterr()
    # alpha 0: the teacher is read but weighs nothing -> the plain run of the seed exactly
    assert run_sweep(base, data, tmp_path / "a0", "--teacher", str(teacher_file),
                     "--alpha", "0") == plain
    printed = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()
               if line.startswith("{")]
    assert printed[0]["variant"].startswith("teacher ") and "auc" in printed[0]
    assert printed[1]["alpha"] == 0 and "agree" in printed[1] and "recall_at_p0.95" in printed[1]
    # alpha 1: only the teacher teaches; a teacher saying "same" of every pair and one saying
    # "different" make different students (identical if the file were ignored)
    student = run_sweep(base, data, tmp_path / "a1", "--teacher", str(teacher_file),
                        "--alpha", "1", "--temperature", "1")
    assert student != plain
    moved = {}
    for sign in (8, -8):
        fake = orjson.loads(teacher_file.read_bytes())
        for part in fake["splits"].values():
            part["ab"] = part["ba"] = [sign] * part["pairs"]
        path = tmp_path / f"fake{sign}.json"
        path.write_bytes(orjson.dumps(fake))
        moved[sign] = np.mean(run_sweep(base, data, tmp_path / f"s{sign}", "--teacher",
                                        str(path), "--alpha", "1"))
    assert moved[8] > np.mean(plain) > moved[-8]
    assert moved[8] - moved[-8] > 0.5


def test_the_gpu_script_runs_every_step_on_a_tiny_bert(tiny: tuple[Path, Path],
                                                       tmp_path: Path) -> None:
    """bench/gpu/judge20.sh on the CPU with the out-of-fold teacher on: every run trains, the
    merged teacher covers train, the summary has a row per run and the carry holds the students'
    weights in parts that join to the saved state dicts."""
    import os
    import subprocess
    import sys

    base, data = tiny
    out = tmp_path / "r"
    recipe = "2/3e-2/mean/7/4"
    env = {**os.environ, "PYTHON": sys.executable, "DEVICE": "cpu", "OOF_DEVICE": "cpu",
           "MPNET": str(base), "MINILM": str(base), "DATA": str(data), "OMP_NUM_THREADS": "1",
           "TEACHER_RECIPE": recipe, "STUDENT_RECIPE": recipe, "STUDENTS": "0.5/2",
           "OOF_STUDENTS": "1/2"}
    done = subprocess.run(["bash", "bench/gpu/judge20.sh", str(out)], env=env,
                          cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    status = sorted((out / "status").read_text().split("\n"))
    assert status == sorted(["", *(f"{n} rc 0" for n in (
        "mpnet", "minilm-plain", "mpnet-fold0", "mpnet-fold1", "mpnet-s12", "minilm-a0.5-t2",
        "minilm-oof-a1-t2"))])
    assert (out / "done").exists()
    train = orjson.loads((out / "teacher-oof.json").read_bytes())["splits"]["train"]
    full = orjson.loads((out / "teacher.json").read_bytes())["splits"]
    assert train["pairs"] == 12 and train["ab"] != full["train"]["ab"]
    assert (orjson.loads((out / "mpnet-s12" / "sweep.json").read_bytes())[0]["variant"]
            == "2/3e-2/mean/12/4")
    summary = (out / "summary.md").read_text()
    assert summary.count("| minilm-") == 3 and "not on dev" in summary
    carry = {p.name for p in (out / "carry").iterdir()}
    assert {"summary.tar.gz", "SHA256SUMS"} <= carry
    assert not any(n.startswith("mpnet-fold") for n in carry)  # seed 12's may ship: carried
    for name in ("minilm-oof-a1-t2", "minilm-plain", "mpnet", "mpnet-s12"):
        joined = b"".join(p.read_bytes() for p in sorted((out / "carry").glob(f"{name}.pt.part*")))
        assert joined == (out / name / "best.pt").read_bytes()


def test_judge_json_records_weights_made_elsewhere_by_their_hash_and_recipe(tmp_path: Path,
                                                                            ) -> None:
    import argparse
    import hashlib

    from tools.judge.train import trained_meta

    weights = tmp_path / "best.pt"
    weights.write_bytes(b"state dict")
    common = {"data": "d", "out": "o", "seed": 11, "epochs": 5, "lr": 8e-5, "batch": 32,
              "floor": 0.4, "pooling": "mean", "base": "b", "quant": "per-channel",
              "threads": 2, "calibrate_only": False}
    meta = trained_meta(argparse.Namespace(**common, weights=weights,
                                           recipe="sweep 5/2e-5/mean/12/32 on an H200"))
    # the local training options did not make these weights: not recorded as if they had
    assert not {"seed", "epochs", "lr", "batch"} & set(meta)
    assert meta["recipe"] == "sweep 5/2e-5/mean/12/32 on an H200"
    assert meta["weights_sha256"] == hashlib.sha256(b"state dict").hexdigest()
    here = trained_meta(argparse.Namespace(**common, weights=None, recipe=None))
    assert here["lr"] == "8e-05" and here["seed"] == "11" and "recipe" not in here


def test_the_variants_script_trains_each_variant_and_carries_it(tiny: tuple[Path, Path],
                                                                tmp_path: Path) -> None:
    """bench/gpu/judge_variants.sh on the CPU: a plain and a label-smoothed variant of one seed
    (the same batches, another loss), the summary, and the carry's parts of their weights."""
    import os
    import subprocess
    import sys

    base, data = tiny
    out = tmp_path / "v"
    env = {**os.environ, "PYTHON": sys.executable, "DEVICES": "cpu cpu", "MPNET": str(base),
           "DATA": str(data), "OMP_NUM_THREADS": "1", "WEIGHTS": "1"}
    done = subprocess.run(["bash", "bench/gpu/judge_variants.sh", str(out),
                           "plain=2/3e-2/mean/7/4", "smooth=2/3e-2/mean/7/4/0.4"], env=env,
                          cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert sorted((out / "status").read_text().split()) == sorted(
        "plain rc 0 smooth rc 0".split())
    plain, smooth = (orjson.loads((out / n / "dev_scores.json").read_bytes()) for n in
                     ("plain", "smooth"))
    assert list(smooth) == ["2/3e-2/mean/7/4/0.4"] and list(plain) == ["2/3e-2/mean/7/4"]
    assert next(iter(plain.values())) != next(iter(smooth.values()))
    summary = (out / "summary.md").read_text()
    assert "| plain |" in summary and "| smooth |" in summary and (out / "done").exists()
    for name in ("plain", "smooth"):
        joined = b"".join(p.read_bytes() for p in sorted((out / "carry").glob(f"{name}.pt.part*")))
        assert joined == (out / name / "best.pt").read_bytes()
