"""bench/procs.py: the CPU benches' shared process helpers."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from bench import procs


def test_the_tiny_model_is_made_when_missing(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # on a fresh clone bench.overhead and bench.cache_cost started the proxy with
    # PROXY_TOKENIZER=.models/tiny before any test had made it: the proxy failed to start
    made: list[list[str]] = []

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        made.append(cmd)
        Path(cmd[-1]).mkdir(parents=True)
        (Path(cmd[-1]) / "config.json").write_text("{}")
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", run)
    model = tmp_path / "tiny"
    assert procs.tiny_model(model) == model
    assert made == [[procs.PY, "-m", "deploy", "tiny-model", str(model)]]
    assert procs.tiny_model(model) == model and len(made) == 1  # made once, then reused


def test_the_proxy_of_the_benches_is_given_the_tiny_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[Path | None] = []
    started: list[dict[str, str]] = []

    def tiny(path: Path | None = None) -> Path:
        asked.append(path)
        return Path("/made/tiny")

    class Started:
        def __init__(self, *args: Any, **kw: Any) -> None:
            started.append(args[4])

    monkeypatch.setattr(procs, "tiny_model", tiny)
    monkeypatch.setattr(procs, "Proc", Started)
    procs.ours("http://127.0.0.1:1", None)
    assert asked == [None] and started[0]["PROXY_TOKENIZER"] == "/made/tiny"
