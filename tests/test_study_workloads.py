"""bench/study_workloads.py: seeded workloads from held-out files, in vLLM's custom format."""

import json

import pytest

from bench.study_workloads import main
from deploy.train_model import COPY_MARKER


def held_out(tmp_path):
    files = []
    for i in range(3):
        f = tmp_path / f"mod{i}.py"
        f.write_text("".join(f"def f{i}_{j}(x):\n    return x + {j}\n" for j in range(600)))
        files.append(str(f))
    listing = tmp_path / "held_out_files.txt"
    listing.write_text("\n".join(files) + "\n")
    return listing


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_only_writes_the_named_workloads_with_the_same_rows(tmp_path):
    listing = held_out(tmp_path)
    assert main([str(listing), str(tmp_path / "all"), "-n", "20"]) == 0
    assert main([str(listing), str(tmp_path / "one"), "-n", "20", "--only", "code_edit"]) == 0
    assert sorted(p.name for p in (tmp_path / "one").iterdir()) == ["code_edit.jsonl"]
    edit = rows(tmp_path / "one" / "code_edit.jsonl")
    assert edit == rows(tmp_path / "all" / "code_edit.jsonl")  # one seed per workload
    assert len(edit) == 20 and all(r["output_tokens"] == 256 for r in edit)
    # the answer repeats the prompt: the chunk, the marker, the chunk's first two lines again
    chunk, head = edit[0]["prompt"].split(COPY_MARKER)
    assert chunk.startswith(head.rstrip("\n"))
    with pytest.raises(SystemExit):
        main([str(listing), str(tmp_path / "x"), "--only", "code_edits"])


def test_shared_prefix_keeps_its_prefixes_however_many_requests_are_written(tmp_path):
    listing = held_out(tmp_path)

    def prefixes(out, *args):
        assert main([str(listing), str(out), "--only", "shared_prefix", *args]) == 0
        return [r["prompt"].split("\n# next:\n")[0] for r in rows(out / "shared_prefix.jsonl")]

    default = prefixes(tmp_path / "d", "-n", "64")
    assert len(set(default)) == 4  # one prefix per 16 requests
    fixed = prefixes(tmp_path / "g", "-n", "64", "--groups", "2")
    assert len(fixed) == 64 and len(set(fixed)) == 2 and fixed[:2] != [fixed[0]] * 2
    assert prefixes(tmp_path / "d2", "-n", "64", "--groups", "4") == default  # the same draws
