"""The committed judge model: loads offline, scores in batches, picks its threshold."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import orjson
import pytest

from proxy.cache.calibrate import pick
from proxy.cache.config import model_dir
from proxy.cache.judge import DRIFT_LIMIT, MODEL_DIR, Judge
from tests.cache_support import judge

SAME = [
    ("How do I reverse a list in Python?", "what's the pythonic way to flip a list backwards"),
    ("What is the capital of France?", "France's capital city?"),
    ("How many people live in Tokyo?", "Tokyo population?"),
]
DIFFERENT = [
    ("How many euros is 100 US dollars?", "How many US dollars is 100 euros?"),
    ("How do I read a CSV file in pandas?", "How do I write a CSV file in pandas?"),
    ("Explain Python decorators", "Write a Python decorator that logs calls"),
    ("Can I run Docker inside Docker?", "Should I run Docker inside Docker?"),
]


def test_model_is_committed_in_small_files_and_loads_offline() -> None:
    files = list(MODEL_DIR.iterdir())
    assert {"judge.onnx", "judge.json", "tokenizer.json"} <= {f.name for f in files}
    assert all(f.stat().st_size < 45_000_000 for f in files)  # mpnet's weights: 3 side files
    j = Judge.open(0.01)
    assert j.threshold == pick(j.rows, 0.01)
    assert 0.0 < j.floor < 1.0
    hits = [r.hits for r in sorted(j.rows, key=lambda r: r.threshold)]
    assert hits == sorted(hits, reverse=True) and hits[0] > 0  # a lower threshold passes more
    j.close()


def test_same_questions_score_above_different_ones() -> None:
    j = judge()
    scores = j.logits([*SAME, *DIFFERENT])
    assert min(scores[:len(SAME)]) > max(scores[len(SAME):]), scores
    assert all(j.accepts(s) for s in scores[:len(SAME)]) and not any(
        j.accepts(s) for s in scores[len(SAME):])  # at the tests' fixed threshold


@pytest.mark.parametrize("name", ["mpnet", "minilm"])
def test_each_bundled_judge_ranks_same_questions_above_different_ones(name: str) -> None:
    j = Judge.open(0.05, model_dir(name))
    scores = j.logits([*SAME, *DIFFERENT])
    assert min(scores[:len(SAME)]) > max(scores[len(SAME):]), scores
    assert math.isfinite(j.threshold)  # both calibrate at 5 % on dev
    j.close()


def test_batched_scores_equal_one_at_a_time() -> None:
    j = judge()
    pairs = [*SAME, *DIFFERENT]
    batch = j.logits(pairs)
    single = [j.logits([p])[0] for p in pairs]
    assert batch == pytest.approx(single, abs=1e-3)


@pytest.mark.parametrize("name", ["mpnet", "minilm"])
def test_the_served_weights_score_what_the_unsigned_ones_do(name: str) -> None:
    # judge_session.py: the weights as stored where this CPU sums u8 x s8 exactly, else the
    # unsigned rewrite; the same integer products, so the same logits to the bit
    auto = Judge.open(0.05, model_dir(name), check=False)
    unsigned = Judge.open(0.05, model_dir(name), check=False, weights="unsigned")
    assert auto.weights in ("stored", "unsigned") and unsigned.weights == "unsigned"
    pairs = [*SAME, *DIFFERENT]
    assert auto.logits(pairs) == unsigned.logits(pairs)
    auto.close()
    unsigned.close()


def test_a_pair_over_the_window_never_passes_and_empty_is_empty() -> None:
    j = judge()
    long = " ".join(["word"] * 200)
    assert j.logits([(long, long + " more")]) == [-math.inf]
    assert j.logits([]) == []


def test_a_stricter_rate_never_lowers_the_threshold() -> None:
    rates = [0.001, 0.01, 0.05, 0.2, 0.5]
    thresholds = [judge(r, threshold=None).threshold for r in rates]
    assert thresholds == sorted(thresholds, reverse=True)


async def test_score_runs_off_the_loop_and_counts() -> None:
    j = judge()
    scores = await j.score(SAME[:2])
    assert len(scores) == 2 and (j.pairs, j.batches) == (2, 1)
    j.close()


@pytest.mark.parametrize("name", ["mpnet", "minilm"])
def test_each_bundled_judge_reproduces_its_reference_logits_on_this_cpu(name: str) -> None:
    # fails CI on a CPU where the judge does not compute what it was calibrated with
    j = Judge.open(0.05, model_dir(name))
    assert j.drift is not None and j.drift <= DRIFT_LIMIT, j.drift
    assert not j.drifted and math.isfinite(j.threshold)
    j.close()


def test_a_judge_whose_reference_pairs_move_accepts_nothing(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = model_dir("minilm")
    for f in src.iterdir():
        if f.name != "judge.json":
            (tmp_path / f.name).symlink_to(f)
    meta = orjson.loads((src / "judge.json").read_bytes())
    meta["reference"][3][2] += 5.0  # one pair far off: a pair whose activations round
    (tmp_path / "judge.json").write_bytes(orjson.dumps(meta))  # the other way, not a bad CPU
    one = Judge.open(0.25, tmp_path)
    assert one.drift is not None and one.drift <= DRIFT_LIMIT and math.isfinite(one.threshold)
    one.close()
    for pair in meta["reference"]:
        pair[2] += 0.5  # as if this CPU scored every pair 0.5 away
    (tmp_path / "judge.json").write_bytes(orjson.dumps(meta))
    with caplog.at_level(logging.ERROR, logger="proxy.cache"):
        j = Judge.open(0.25, tmp_path)
    assert j.drifted and j.drift == pytest.approx(0.5, abs=0.01)
    assert j.threshold == math.inf and not j.accepts(1e9)
    assert "accepts nothing" in caplog.text
    unchecked = Judge.open(0.25, tmp_path, check=False)  # the tools' way to look anyway
    assert unchecked.drift is None and math.isfinite(unchecked.threshold)
    j.close()
    unchecked.close()
