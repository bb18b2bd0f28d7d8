from pathlib import Path

import orjson
import pytest

from tools.judge.cascade import main


def write(tmp: Path, name: str, data: object) -> Path:
    path = tmp / name
    path.write_bytes(orjson.dumps(data))
    return path


def test_a_cheap_judge_that_agrees_sends_only_the_accepted_pairs_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    same = [True, True, False, False, True, False, False, False]
    strong = [5.0, 4.0, 3.0, -1.0, -2.0, -3.0, -4.0, -5.0]
    dev = tmp_path / "dev.jsonl"
    dev.write_bytes(b"\n".join(orjson.dumps({"same": s}) for s in same) + b"\n")
    cheap = write(tmp_path, "cheap.json", {"v": [x / 2 for x in strong]})  # the same order
    main([str(dev), str(cheap), str(write(tmp_path, "strong.json", {"v": strong})),
          "--strong-at", "3.5", "--keep", "1"])
    line = capsys.readouterr().out.splitlines()[1]
    # 2 of 8 pass the cheap judge's cut (2.0), both accepted by the strong one, both equal
    assert "cheap >= 2.00" in line and "needing the strong judge 0.250" in line
    assert "cascade P 1.000 R 0.667 (strong alone P 1.000 R 0.667)" in line
