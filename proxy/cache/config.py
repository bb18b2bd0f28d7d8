"""The cache's settings, read from the app's settings object (or the environment)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MODES = ("off", "exact", "semantic")
HERE = Path(__file__).resolve().parent
JUDGES = {"mpnet": HERE / "judge_model", "minilm": HERE / "judge_model_minilm"}


def model_dir(name: str | None) -> Path:
    """PROXY_CACHE_JUDGE_MODEL: a bundled judge by name, else a directory holding judge.json."""
    if not name:
        return JUDGES["mpnet"]
    if name.lower() in JUDGES:
        return JUDGES[name.lower()]
    path = Path(name).expanduser()
    if not (path / "judge.json").is_file():
        raise ValueError(f"PROXY_CACHE_JUDGE_MODEL must be one of {sorted(JUDGES)} or a "
                         f"directory with a judge.json, not {name!r}")
    return path
# The format of the cache's keys and records in Redis, in every key it writes there:
# `{PROXY_CACHE_REDIS_PREFIX}:{REDIS_FORMAT}:…` (redis_store.py, redis_claims.py). Bump it with
# any change a replica of the previous format could not read: each format then finds only its
# own entries, never another's (docs/cache.md); keys.py hashes it into every partition, so the
# embedded store's snapshot finds no other format's entries either. v1: the keys before they
# carried it; v2: exact and partition keys hashed every object with its keys sorted, so schemas
# that differ only in property order shared one answer (keys.py: v3 keeps the order where vLLM
# may see it).
REDIS_FORMAT = "v3"
EMBED_BACKENDS = ("onnx", "torch")
# the cache's settings read from the environment alone (the rest are also in proxy.settings_env)
ENV_ONLY = ("PROXY_CACHE_EMBED_BACKEND", "PROXY_CACHE_EMBED_MAX_PENDING",
            "PROXY_CACHE_EMBED_MODEL", "PROXY_CACHE_EMBED_THREADS",
            "PROXY_CACHE_FLIGHT_MAX_BYTES", "PROXY_CACHE_JUDGE_MAX_PENDING",
            "PROXY_CACHE_JUDGE_THREADS", "PROXY_CACHE_REDIS_PREFIX", "PROXY_CACHE_SHARED",
            "PROXY_CACHE_SNAPSHOT")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    mode: str = "semantic"  # PROXY_CACHE
    threshold: float = 0.4  # PROXY_CACHE_THRESHOLD: cosine floor for the judge's candidates
    max_false_hit_rate: float = 0.01  # PROXY_CACHE_MAX_FALSE_HIT_RATE: the judge's error bound
    ttl: float | None = 86_400.0  # PROXY_CACHE_TTL seconds; 0 = forever
    max_entries: int = 100_000  # PROXY_CACHE_MAX_ENTRIES
    redis_url: str | None = None  # PROXY_REDIS_URL; None = embedded store
    embed_model: str | None = None  # PROXY_CACHE_EMBED_MODEL; None = bundled MiniLM
    shared: bool = False  # PROXY_CACHE_SHARED: tenants share answers
    snapshot: Path | None = None  # PROXY_CACHE_SNAPSHOT: embedded store's file
    namespace: str = "vsp"  # PROXY_CACHE_REDIS_PREFIX: Redis key prefix
    embed_threads: int | None = None  # PROXY_CACHE_EMBED_THREADS; None = half the cores, 1..4
    embed_backend: str = "onnx"  # PROXY_CACHE_EMBED_BACKEND: onnx | torch
    top_k: int = 4
    wait_s: float = 120.0  # how long an identical miss waits for the one in flight
    # PROXY_CACHE_FLIGHT_MAX_BYTES: a streaming single flight takes no new follower past this
    # much of the leader's stream (flight.py); 0 = streaming followers wait for the store
    flight_max_bytes: int = 1 << 20
    # PROXY_CACHE_JUDGE_MAX_PENDING: lookups that may wait for the judge at once; past it a
    # lookup skips the judge (a miss, reason judge_busy) instead of queueing; 0 = no bound
    judge_max_pending: int = 4
    # PROXY_CACHE_EMBED_MAX_PENDING: texts that may wait for the embedder at once (queued or
    # encoding); past it a lookup skips the semantic tier (a miss unless the exact tier hit,
    # reason embed_busy) and a store keeps its entry for the exact tier only; 0 = no bound
    embed_max_pending: int = 64
    # PROXY_CACHE_JUDGE_MODEL: mpnet (bundled, default) | minilm (bundled, ~6x cheaper per
    # candidate, less recall at the same bound) | a directory made by tools.judge.train
    judge_model: str = "mpnet"
    # PROXY_CACHE_JUDGE_THREADS: ONNX Runtime threads for one judge pass (the judge runs one
    # pass at a time); for hosts with idle cores: on the shared 2-core box 2 threads were
    # 2x slower in the bench (docs/cache.md)
    judge_threads: int = 1

    @property
    def judge_dir(self) -> Path:
        return model_dir(self.judge_model)

    @staticmethod
    def from_settings(settings: Any = None) -> CacheConfig:
        """Attributes `cache_*` / `redis_url` of the app's settings win over PROXY_* env vars."""
        env = os.environ

        def pick(attr: str, var: str, default: Any) -> Any:
            value = getattr(settings, attr, None) if settings is not None else None
            return value if value is not None else env.get(var, default)

        ttl = float(pick("cache_ttl", "PROXY_CACHE_TTL", 86_400.0))
        snap = pick("cache_snapshot", "PROXY_CACHE_SNAPSHOT", None)
        cfg = CacheConfig(
            mode=str(pick("cache", "PROXY_CACHE", "semantic")).lower(),
            threshold=float(pick("cache_threshold", "PROXY_CACHE_THRESHOLD", 0.4)),
            max_false_hit_rate=float(pick("cache_max_false_hit_rate",
                                          "PROXY_CACHE_MAX_FALSE_HIT_RATE", 0.01)),
            ttl=ttl if ttl > 0 else None,
            max_entries=int(pick("cache_max_entries", "PROXY_CACHE_MAX_ENTRIES", 100_000)),
            redis_url=pick("redis_url", "PROXY_REDIS_URL", None) or None,
            embed_model=pick("cache_embed_model", "PROXY_CACHE_EMBED_MODEL", None) or None,
            shared=str(pick("cache_shared", "PROXY_CACHE_SHARED", "0")).lower()
            in ("1", "true", "yes", "on"),
            snapshot=Path(snap) if snap else None,
            namespace=str(pick("cache_redis_prefix", "PROXY_CACHE_REDIS_PREFIX", "vsp")),
            embed_threads=int(pick("cache_embed_threads", "PROXY_CACHE_EMBED_THREADS", 0)) or None,
            embed_backend=str(pick("cache_embed_backend", "PROXY_CACHE_EMBED_BACKEND",
                                   "onnx")).lower(),
            flight_max_bytes=int(pick("cache_flight_max_bytes", "PROXY_CACHE_FLIGHT_MAX_BYTES",
                                      1 << 20)),
            judge_max_pending=int(pick("cache_judge_max_pending",
                                       "PROXY_CACHE_JUDGE_MAX_PENDING", 4)),
            embed_max_pending=int(pick("cache_embed_max_pending",
                                       "PROXY_CACHE_EMBED_MAX_PENDING", 64)),
            judge_model=str(pick("cache_judge_model", "PROXY_CACHE_JUDGE_MODEL", "mpnet")),
            judge_threads=int(pick("cache_judge_threads", "PROXY_CACHE_JUDGE_THREADS", 1)),
        )
        if cfg.mode not in MODES:
            raise ValueError(f"PROXY_CACHE must be one of {MODES}, not {cfg.mode!r}")
        if not 0.0 < cfg.threshold <= 1.0:
            raise ValueError("PROXY_CACHE_THRESHOLD must be in (0, 1]")
        if not 0.0 < cfg.max_false_hit_rate < 1.0:
            raise ValueError("PROXY_CACHE_MAX_FALSE_HIT_RATE must be in (0, 1)")
        if cfg.embed_backend not in EMBED_BACKENDS:
            raise ValueError("PROXY_CACHE_EMBED_BACKEND must be onnx or torch")
        if cfg.flight_max_bytes < 0:
            raise ValueError("PROXY_CACHE_FLIGHT_MAX_BYTES must be at least 0")
        if cfg.judge_threads < 1:
            raise ValueError("PROXY_CACHE_JUDGE_THREADS must be at least 1")
        if cfg.judge_max_pending < 0:
            raise ValueError("PROXY_CACHE_JUDGE_MAX_PENDING must be at least 0")
        if cfg.embed_max_pending < 0:
            raise ValueError("PROXY_CACHE_EMBED_MAX_PENDING must be at least 0")
        model_dir(cfg.judge_model)  # raises on an unknown name or a directory without a model
        if cfg.max_entries < 1:
            raise ValueError("PROXY_CACHE_MAX_ENTRIES must be at least 1")
        return cfg
