from __future__ import annotations

import pytest

from proxy.cache.config import CacheConfig


def test_embed_backend_comes_from_the_environment_and_is_checked(monkeypatch) -> None:
    assert CacheConfig.from_settings().embed_backend == "onnx"
    monkeypatch.setenv("PROXY_CACHE_EMBED_BACKEND", "Torch")
    assert CacheConfig.from_settings().embed_backend == "torch"
    monkeypatch.setenv("PROXY_CACHE_EMBED_BACKEND", "gpu")
    with pytest.raises(ValueError, match="PROXY_CACHE_EMBED_BACKEND must be onnx or torch"):
        CacheConfig.from_settings()


def test_bad_values_fail_with_the_variable_named(monkeypatch) -> None:
    monkeypatch.setenv("PROXY_CACHE_THRESHOLD", "1.5")
    with pytest.raises(ValueError, match="PROXY_CACHE_THRESHOLD"):
        CacheConfig.from_settings()


def test_false_hit_rate_bound_defaults_reads_and_is_checked(monkeypatch) -> None:
    assert CacheConfig.from_settings().max_false_hit_rate == 0.01
    monkeypatch.setenv("PROXY_CACHE_MAX_FALSE_HIT_RATE", "0.05")
    assert CacheConfig.from_settings().max_false_hit_rate == 0.05
    monkeypatch.setenv("PROXY_CACHE_MAX_FALSE_HIT_RATE", "0")
    with pytest.raises(ValueError, match="PROXY_CACHE_MAX_FALSE_HIT_RATE"):
        CacheConfig.from_settings()


def test_flight_bound_defaults_reads_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CacheConfig.from_settings().flight_max_bytes == 1 << 20
    monkeypatch.setenv("PROXY_CACHE_FLIGHT_MAX_BYTES", "0")
    assert CacheConfig.from_settings().flight_max_bytes == 0
    monkeypatch.setenv("PROXY_CACHE_FLIGHT_MAX_BYTES", "-1")
    with pytest.raises(ValueError, match="PROXY_CACHE_FLIGHT_MAX_BYTES"):
        CacheConfig.from_settings()


def test_judge_model_is_a_bundled_name_or_a_model_directory(monkeypatch, tmp_path) -> None:
    from proxy.cache.config import JUDGES, model_dir

    assert CacheConfig.from_settings().judge_model == "mpnet"
    assert model_dir("mpnet") == JUDGES["mpnet"] and model_dir(None) == JUDGES["mpnet"]
    assert all((path / "judge.json").is_file() for path in JUDGES.values())
    monkeypatch.setenv("PROXY_CACHE_JUDGE_MODEL", "minilm")
    assert model_dir(CacheConfig.from_settings().judge_model) == JUDGES["minilm"]
    (tmp_path / "judge.json").write_text("{}")
    monkeypatch.setenv("PROXY_CACHE_JUDGE_MODEL", str(tmp_path))
    assert model_dir(CacheConfig.from_settings().judge_model) == tmp_path
    monkeypatch.setenv("PROXY_CACHE_JUDGE_MODEL", str(tmp_path / "nothing-here"))
    with pytest.raises(ValueError, match="PROXY_CACHE_JUDGE_MODEL"):
        CacheConfig.from_settings()


def test_judge_threads_default_to_one_and_are_checked(monkeypatch) -> None:
    assert CacheConfig.from_settings().judge_threads == 1
    monkeypatch.setenv("PROXY_CACHE_JUDGE_THREADS", "2")
    assert CacheConfig.from_settings().judge_threads == 2
    monkeypatch.setenv("PROXY_CACHE_JUDGE_THREADS", "0")
    with pytest.raises(ValueError, match="PROXY_CACHE_JUDGE_THREADS"):
        CacheConfig.from_settings()


def test_embed_bound_defaults_reads_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert CacheConfig.from_settings().embed_max_pending == 64
    monkeypatch.setenv("PROXY_CACHE_EMBED_MAX_PENDING", "0")  # no bound
    assert CacheConfig.from_settings().embed_max_pending == 0
    monkeypatch.setenv("PROXY_CACHE_EMBED_MAX_PENDING", "8")
    assert CacheConfig.from_settings().embed_max_pending == 8
    monkeypatch.setenv("PROXY_CACHE_EMBED_MAX_PENDING", "-1")
    with pytest.raises(ValueError, match="PROXY_CACHE_EMBED_MAX_PENDING"):
        CacheConfig.from_settings()
    monkeypatch.setenv("PROXY_CACHE_EMBED_MAX_PENDING", "many")
    with pytest.raises(ValueError, match="many"):
        CacheConfig.from_settings()
