"""Where the settings come from: PROXY_* env vars, overridden by the serve command's flags
(one table, _SPEC: setting -> variable, parser, help); a typo in a variable's name is
named with the closest real one (unknown_env)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from proxy.settings import Settings, SettingsError


def _int(v: str) -> int:
    return int(v.strip())


def _opt_int(v: str) -> int | None:
    return None if v.strip().lower() in ("", "none", "auto") else int(v)


def _float(v: str) -> float:
    return float(v.strip())


def _onoff(v: str) -> bool:
    lowered = v.strip().lower()
    if lowered in ("on", "true", "1", "yes"):
        return True
    if lowered in ("off", "false", "0", "no"):
        return False
    raise ValueError("expected on or off")


def _csv(v: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in v.split(",") if item.strip())


def _urls(v: str) -> tuple[str, ...]:
    return tuple(u.rstrip("/") for u in _csv(v))


def _opt_str(v: str) -> str | None:
    return v.strip() or None


def _str(v: str) -> str:
    return v.strip()


# field -> (env var, parser, help)
_SPEC: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "upstreams": ("PROXY_UPSTREAM", _urls, "vLLM base URL(s), comma-separated"),
    "host": ("PROXY_HOST", _str, "listen address"),
    "port": ("PROXY_PORT", _int, "listen port"),
    "workers": ("PROXY_WORKERS", _int, "worker processes (one event loop each)"),
    "max_input_tokens": ("PROXY_MAX_INPUT_TOKENS", _opt_int, "input token limit"),
    "input_overflow": ("PROXY_INPUT_OVERFLOW", _str, "reject | truncate"),
    "max_output_tokens": ("PROXY_MAX_OUTPUT_TOKENS", _int, "cap on max_tokens"),
    "greedy": ("PROXY_GREEDY", _onoff, "force greedy sampling: on | off"),
    "api_keys": ("PROXY_API_KEYS", _csv, "bearer tokens, comma-separated (unset: open)"),
    "tokenizer": ("PROXY_TOKENIZER", _opt_str, "tokenizer path or name"),
    "max_inflight": ("PROXY_MAX_INFLIGHT", _int, "concurrent upstream requests"),
    "max_waiting": ("PROXY_MAX_WAITING", _int, "requests that may wait for a slot"),
    "queue_timeout": ("PROXY_QUEUE_TIMEOUT", _float, "seconds to wait for a slot"),
    "tenant_share": ("PROXY_TENANT_SHARE", _float,
                     "share of PROXY_MAX_INFLIGHT one API key may hold (0..1]"),
    "connection_guard": ("PROXY_CONNECTION_GUARD", _onoff,
                         "header deadline and connection caps: on | off"),
    "header_timeout": ("PROXY_HEADER_TIMEOUT", _float,
                       "seconds for a request's headers to arrive"),
    "keepalive_timeout": ("PROXY_KEEPALIVE_TIMEOUT", _int,
                          "seconds an idle keep-alive connection is kept"),
    "max_connections": ("PROXY_MAX_CONNECTIONS", _opt_int,
                        "open client connections (default: the file limit less 1024)"),
    "max_connections_per_ip": ("PROXY_MAX_CONNECTIONS_PER_IP", _opt_int,
                               "open connections per client IP (default: no cap)"),
    "key_limits": ("PROXY_KEY_LIMITS", _opt_str,
                   "per-key concurrent/rpm/tpm limits: JSON, inline or a file path"),
    "key_limits_shared": ("PROXY_KEY_LIMITS_SHARED", _onoff,
                          "hold per-key limits across workers and replicas (needs Redis)"),
    "send_timeout": ("PROXY_SEND_TIMEOUT", _float,
                     "seconds without write progress before a stream or JSON answer is cut"),
    "body_timeout": ("PROXY_BODY_TIMEOUT", _float,
                     "seconds for a whole request body to arrive (else 408)"),
    "drain_timeout": ("PROXY_DRAIN_TIMEOUT", _float,
                      "at shutdown, seconds streams that others follow may take to finish"),
    "shutdown_timeout": ("PROXY_SHUTDOWN_TIMEOUT", _float,
                         "at SIGTERM, seconds requests in flight may take to finish before "
                         "they are cut (new connections are refused at once)"),
    "max_body_bytes": ("PROXY_MAX_BODY_BYTES", _int, "request body limit"),
    "max_event_bytes": ("PROXY_MAX_EVENT_BYTES", _int,
                        "bytes of one upstream stream event the proxy buffers, at most"),
    "max_answer_bytes": ("PROXY_MAX_ANSWER_BYTES", _int,
                         "bytes of one upstream answer read whole (not streamed), at most"),
    "max_json_depth": ("PROXY_MAX_JSON_DEPTH", _int, "nesting depth limit of request JSON"),
    "max_messages": ("PROXY_MAX_MESSAGES", _int, "messages per chat request"),
    "max_prompts": ("PROXY_MAX_PROMPTS", _int, "prompts per completions batch"),
    "connect_timeout": ("PROXY_CONNECT_TIMEOUT", _float, "upstream connect timeout (s)"),
    "read_timeout": ("PROXY_READ_TIMEOUT", _float, "upstream read timeout (s)"),
    "upstream_backoff": ("PROXY_UPSTREAM_BACKOFF", _float, "seconds a failed upstream rests"),
    "health_interval": ("PROXY_HEALTH_INTERVAL", _float,
                        "seconds between /health probes of each of several upstreams (0: off)"),
    "upstream_header": ("PROXY_UPSTREAM_HEADER", _onoff,
                        "answer with X-Upstream (the replica that served): on | off"),
    "routing": ("PROXY_ROUTING", _str, "least-loaded | prefix | session | kv-events"),
    "routing_block_size": ("PROXY_ROUTING_BLOCK_SIZE", _int, "vLLM's KV block size (tokens)"),
    "routing_index_blocks": ("PROXY_ROUTING_INDEX_BLOCKS", _int,
                             "block hashes remembered per replica"),
    "routing_load_weight": ("PROXY_ROUTING_LOAD_WEIGHT", _float,
                            "weight of load against prefix/session affinity"),
    "routing_load_slack": ("PROXY_ROUTING_LOAD_SLACK", _float,
                           "requests of imbalance tolerated on an idle pool"),
    "routing_poll_interval": ("PROXY_ROUTING_POLL_INTERVAL", _float,
                              "seconds between polls of vLLM's /metrics (0: off)"),
    "routing_session_header": ("PROXY_ROUTING_SESSION_HEADER", _str,
                               "header naming the session (else the body's user)"),
    "routing_kv_events": ("PROXY_ROUTING_KV_EVENTS", _csv,
                          "kv-events: vLLM ZMQ publishers, one per upstream, in order"),
    "log_level": ("PROXY_LOG_LEVEL", _str, "debug | info | warning | error"),
    "log_prompts": ("PROXY_LOG_PROMPTS", _onoff, "log prompt text: on | off"),
    "cache": ("PROXY_CACHE", _str, "off | exact | semantic"),
    "cache_threshold": ("PROXY_CACHE_THRESHOLD", _float, "semantic similarity threshold"),
    "cache_max_false_hit_rate": ("PROXY_CACHE_MAX_FALSE_HIT_RATE", _float,
                                 "largest share of semantic hits that may be wrong"),
    "cache_judge_model": ("PROXY_CACHE_JUDGE_MODEL", _str,
                          "the judge: mpnet | minilm | a model directory"),
    "cache_ttl": ("PROXY_CACHE_TTL", _float, "cache entry lifetime (s)"),
    "cache_max_entries": ("PROXY_CACHE_MAX_ENTRIES", _int, "cache size"),
    "cache_hedge": ("PROXY_CACHE_HEDGE", _onoff,
                    "start the upstream call while the semantic tier searches: on | off"),
    "cache_exact_only": ("PROXY_CACHE_EXACT_ONLY", _csv,
                         "exact tier only for: chat, completions, key:<identity> (comma "
                         "list; empty: none)"),
    "redis_url": ("PROXY_REDIS_URL", _opt_str, "Redis for the cache (unset: memory)"),
    "admin_key": ("PROXY_ADMIN_KEY", _opt_str, "key for the cache admin endpoints"),
    "metrics_key": ("PROXY_METRICS_KEY", _opt_str, "bearer key for /metrics and /ready"),
}


def _flag(name: str) -> str:
    return "--" + ("upstream" if name == "upstreams" else name).replace("_", "-")


def add_flags(parser: argparse.ArgumentParser) -> None:
    for name, (env, _, help_) in _SPEC.items():
        parser.add_argument(_flag(name), dest=name, default=None, metavar=env,
                            help=f"{help_} (env {env})")


def load_settings(env: Mapping[str, str] | None = None,
                  flags: Mapping[str, str | None] | None = None) -> Settings:
    """Env vars first, then flags (strings, as argparse gives them) override them."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for name, (var, parse, _) in _SPEC.items():
        raw = (flags or {}).get(name)
        source = _flag(name) if raw is not None else var
        if raw is None:
            raw = env.get(var)
        if raw is None:
            continue
        try:
            values[name] = parse(raw)
        except ValueError as exc:
            raise SettingsError(f"{source}: cannot parse {raw!r} ({exc})") from None
    settings = Settings(**values)
    if settings.workers > 1 and env.get("PROXY_CACHE_SNAPSHOT") and not settings.redis_url:
        # each worker would write its own cache over the same file at stop: one survives
        raise SettingsError("PROXY_CACHE_SNAPSHOT keeps one process's cache; with "
                            "PROXY_WORKERS > 1 set PROXY_REDIS_URL instead (shared, and kept "
                            "across restarts by Redis)")
    return settings


def unknown_env(env: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """PROXY_* variables nothing reads (a mistyped name leaves its setting at the default),
    each with the closest name that is read."""
    import difflib

    from proxy.cache.config import ENV_ONLY

    known = sorted({var for var, _, _ in _SPEC.values()} | set(ENV_ONLY))
    return [(name, next(iter(difflib.get_close_matches(name, known, 1, 0.6)), None))
            for name in sorted(env) if name.startswith("PROXY_") and name not in known]


def _cli_flags(argv: Sequence[str]) -> dict[str, str | None]:
    parser = argparse.ArgumentParser(prog="python -m proxy serve")
    add_flags(parser)
    ns = parser.parse_args(list(argv))
    return {f.name: getattr(ns, f.name, None) for f in fields(Settings)}


def parse_cli(argv: Sequence[str], env: Mapping[str, str] | None = None) -> Settings:
    return load_settings(env, _cli_flags(argv))


def cli_env(argv: Sequence[str]) -> dict[str, str]:
    """The PROXY_* variables the CLI flags stand for: worker processes read settings from env."""
    return {_SPEC[name][0]: raw for name, raw in _cli_flags(argv).items()
            if raw is not None and name in _SPEC}
