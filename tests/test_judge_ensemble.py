"""tools/judge/ensemble.py: recall at a precision, precision at a recall, the combined rows."""

import json

import numpy as np

from tools.judge.ensemble import main, precision_at, recall_at


def test_recall_at_precision_and_precision_at_recall():
    y = np.array([1, 1, 0, 1, 0, 0], dtype=bool)
    s = np.array([6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    assert recall_at(y, s, 1.0) == 2 / 3  # the top two are right, the third is wrong
    assert recall_at(y, s, 0.75) == 1.0  # 3 right of the top 4
    assert precision_at(y, s, 1.0) == 0.75
    assert recall_at(y, -s, 0.99) == 0.0  # the most confident pair is wrong


def test_the_table_has_each_judge_and_each_pair_combined(tmp_path, capsys):
    dev = tmp_path / "dev.jsonl"
    dev.write_text("".join(json.dumps({"a": "x", "b": "y", "same": v}) + "\n"
                           for v in (True, False, True, False)))
    (tmp_path / "a.json").write_text(json.dumps({"v": [4, 3, 2, 1]}))
    (tmp_path / "b.json").write_text(json.dumps([1, 2, 3, 4]))
    main([str(dev), f"a={tmp_path / 'a.json'}", f"b={tmp_path / 'b.json'}"])
    out = capsys.readouterr().out
    assert "dev pairs: 4 (2 equal)" in out
    # by a's order the labels run 1, 0, 1, 0: only the top pair is at precision >= 0.90
    assert "| a | 0.500 / 0.500 / 0.500 | 0.667 |" in out
    assert "| mean(a, b) |" in out and "| min(a, b) |" in out
