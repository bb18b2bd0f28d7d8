"""tools.judge.errors: where a judge's confident mistakes are."""

from __future__ import annotations

import numpy as np

from tools.judge.errors import report


def test_counts_false_hits_by_kind_at_the_top_and_at_recall_085() -> None:
    dev = ([{"same": True, "kind": "paraphrase"}] * 20
           + [{"same": False, "kind": "task"}] * 3 + [{"same": False, "kind": "entity"}] * 7)
    # the 3 task pairs score above every equal pair, the entity pairs below all of them
    scores = np.array([float(i) for i in range(20)] + [30.0, 31.0, 32.0] + [-5.0] * 7)
    lines = report("v", dev, scores).splitlines()
    # only the most confident pair (32, a task pair) is within 0.02 of the highest logit
    assert lines.pop(0) == ("v logits -5.00 .. 32.00; within 0.02 of the top: 1 pairs, "
                            "precision 0.0000, recall 0.000")
    assert lines[0] == "v top 200: 10 false hits {'entity': 7, 'task': 3}"
    last = lines[-1]
    assert "precision 0.850" in last and "3 false hits" in last  # 17 equal kept of 20
    assert "task 3/3" in last and "entity 0/7" in last
