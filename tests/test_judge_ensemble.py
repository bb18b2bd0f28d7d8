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


def test_rates_calibrate_each_row_as_the_proxy_would(tmp_path, capsys):
    from tools.judge.distil import fingerprint

    dev = [{"a": f"q{i}", "b": f"p{i}", "same": i < 100, "family": f"f{i % 20}"}
           for i in range(200)]
    path = tmp_path / "dev.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in dev))
    good = [5.0 if d["same"] else -5.0 for d in dev]  # separates them
    (tmp_path / "good.json").write_text(json.dumps({"v": good}))
    teacher = {"source": {}, "splits": {"dev": {
        "fingerprint": fingerprint(dev), "pairs": len(dev), "ab": good,
        "ba": [1.0 - 2 * (i % 2) for i in range(len(dev))]}}}  # by parity: half are wrong
    (tmp_path / "teacher.json").write_text(json.dumps(teacher))
    main([str(path), f"good={tmp_path / 'good.json'}", f"ab={tmp_path / 'teacher.json'}@ab",
          f"ba={tmp_path / 'teacher.json'}@ba", "--rates", "0.01", "0.25"])
    out = capsys.readouterr().out
    # 100 hits are too few to test 1 % (calibrate.start_hits); at 25 % the separated pass whole
    assert "| good | none | 1.000 / 1.0000 |" in out
    assert "| ab | none | 1.000 / 1.0000 |" in out
    assert "| ba | none | none |" in out
