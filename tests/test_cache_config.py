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
