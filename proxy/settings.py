"""The proxy's settings: one frozen Settings object, validated when it is made (a bad value
is a SettingsError naming its PROXY_* variable). settings_env.py reads the values from
PROXY_* env vars and the serve command's flags."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

ROUTING_POLICIES = ("least-loaded", "prefix", "session", "kv-events")
ANSWER_BYTES = 64 * 1024 * 1024  # PROXY_MAX_ANSWER_BYTES' default: far above any real answer


class SettingsError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Settings:
    upstreams: tuple[str, ...] = ("http://127.0.0.1:8100",)
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1  # uvicorn worker processes; each keeps its own embedded cache (use Redis)
    max_input_tokens: int | None = None  # None: whatever the model's context allows
    input_overflow: str = "reject"  # reject | truncate
    max_output_tokens: int = 512
    greedy: bool = True
    api_keys: tuple[str, ...] = ()
    tokenizer: str | None = None  # path or name; None: discover from upstream /v1/models
    max_inflight: int = 256  # concurrent upstream requests
    max_waiting: int = 256  # requests allowed to wait for a slot
    queue_timeout: float = 2.0  # seconds a request may wait for a slot before 429
    tenant_share: float = 0.5  # with API keys: the share of max_inflight one key may hold
    connection_guard: bool = True  # proxy/guard.py around uvicorn's protocol (off: bare)
    header_timeout: float = 10.0  # seconds for a request's headers to arrive (connection guard)
    keepalive_timeout: int = 5  # seconds an idle keep-alive connection stays open
    max_connections: int | None = None  # None: the file limit less a headroom
    max_connections_per_ip: int | None = None  # None: no cap per client IP
    key_limits: str | None = None  # per-key limits: inline JSON or a file (proxy/limits.py)
    key_limits_shared: bool = False  # hold them across workers/replicas through PROXY_REDIS_URL
    send_timeout: float = 30.0  # seconds a stream or JSON answer may make no write progress
    body_timeout: float = 30.0  # seconds for a whole request body to arrive (else 408)
    drain_timeout: float = 30.0  # at shutdown, seconds handed-over streams may take to finish
    shutdown_timeout: float = 25.0  # at SIGTERM, seconds requests in flight may take to finish
    max_body_bytes: int = 4 * 1024 * 1024
    max_event_bytes: int = 32 * 1024 * 1024  # an upstream SSE event not yet ended (buffered)
    max_answer_bytes: int = ANSWER_BYTES  # an upstream answer read whole (JSON, not a stream)
    max_json_depth: int = 64  # nesting of the request JSON (orjson cannot write > 254)
    max_messages: int = 2048  # messages in one chat request
    max_prompts: int = 64  # prompts in one completions batch
    connect_timeout: float = 5.0
    read_timeout: float = 600.0  # between two chunks from vLLM
    upstream_backoff: float = 5.0  # seconds an upstream stays marked down after a connect error
    health_interval: float = 2.0  # seconds between /health probes of each of several upstreams
    upstream_header: bool = False  # answer with X-Upstream: the replica that served
    # Routing over several upstreams (proxy/routing/, docs/routing.md).
    routing: str = "least-loaded"  # least-loaded | prefix | session | kv-events
    routing_block_size: int = 16  # vLLM's --block-size (GPU default 16; vLLM-CPU uses 128)
    routing_index_blocks: int = 65536  # block hashes remembered per replica (LRU)
    routing_load_weight: float = 1.0  # how much load outweighs affinity (load.py)
    routing_load_slack: float = 4.0  # requests of imbalance tolerated on an idle pool
    routing_poll_interval: float = 1.0  # seconds between /metrics polls of each replica (0: off)
    routing_session_header: str = "x-session-id"
    routing_kv_events: tuple[str, ...] = ()  # kv-events: each upstream's vLLM ZMQ publisher
    log_level: str = "info"
    log_prompts: bool = False
    # The answer cache (proxy/cache/).
    cache: str = "semantic"  # off | exact | semantic
    cache_threshold: float = 0.40  # cosine floor; the learned judge decides (docs/cache.md)
    cache_max_false_hit_rate: float = 0.01  # the learned judge's error bound (docs/cache.md)
    cache_judge_model: str = "mpnet"  # mpnet | minilm | a directory from tools.judge.train
    cache_ttl: float = 3600.0
    cache_max_entries: int = 10000
    cache_hedge: bool = True  # start the upstream call while the semantic tier searches
    # exact tier only for these: "chat", "completions", "key:<identity>" (proxy/policy.py).
    # Completions by default: vLLM continues a prompt from its every character ("...np" and
    # "...np." differ), so no other prompt is the same request; () gives it the semantic tier
    cache_exact_only: tuple[str, ...] = ("completions",)
    redis_url: str | None = None
    admin_key: str | None = None
    metrics_key: str | None = None  # when set, /metrics and /ready need it as a bearer token

    def __post_init__(self) -> None:
        _validate(self)


def _judge_model_ok(name: str) -> bool:
    from proxy.cache.config import model_dir  # paths only: no model is loaded

    try:
        model_dir(name)
    except ValueError:
        return False
    return True


def _validate(s: Settings) -> None:
    if not s.upstreams:
        raise SettingsError("PROXY_UPSTREAM: at least one vLLM base URL is needed")
    for url in s.upstreams:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise SettingsError(f"PROXY_UPSTREAM: {url!r} is not an http(s) URL")
    checks: list[tuple[bool, str]] = [
        (0 < s.port < 65536, "PROXY_PORT must be 1..65535"),
        (1 <= s.workers <= 256, "PROXY_WORKERS must be 1..256"),
        (s.max_input_tokens is None or s.max_input_tokens > 0,
         "PROXY_MAX_INPUT_TOKENS must be positive"),
        (s.input_overflow in ("reject", "truncate"), "PROXY_INPUT_OVERFLOW: reject or truncate"),
        (s.max_output_tokens > 0, "PROXY_MAX_OUTPUT_TOKENS must be positive"),
        (s.max_inflight > 0, "PROXY_MAX_INFLIGHT must be positive"),
        (s.max_waiting >= 0, "PROXY_MAX_WAITING must be >= 0"),
        (s.queue_timeout >= 0, "PROXY_QUEUE_TIMEOUT must be >= 0"),
        (0.0 < s.tenant_share <= 1.0, "PROXY_TENANT_SHARE must be in (0, 1]"),
        (s.send_timeout > 0, "PROXY_SEND_TIMEOUT must be positive"),
        (s.body_timeout > 0, "PROXY_BODY_TIMEOUT must be positive"),
        (s.drain_timeout >= 0, "PROXY_DRAIN_TIMEOUT must be >= 0"),
        (s.shutdown_timeout >= 0, "PROXY_SHUTDOWN_TIMEOUT must be >= 0"),
        (s.header_timeout > 0 and s.keepalive_timeout > 0,
         "PROXY_HEADER_TIMEOUT and PROXY_KEEPALIVE_TIMEOUT must be positive"),
        ((s.max_connections or 1) > 0 and (s.max_connections_per_ip or 1) > 0,
         "PROXY_MAX_CONNECTIONS(_PER_IP) must be positive"),
        (s.max_body_bytes > 0, "PROXY_MAX_BODY_BYTES must be positive"),
        (s.max_event_bytes > 0, "PROXY_MAX_EVENT_BYTES must be positive"),
        (s.max_answer_bytes > 0, "PROXY_MAX_ANSWER_BYTES must be positive"),
        (not s.key_limits_shared or bool(s.redis_url),
         "PROXY_KEY_LIMITS_SHARED needs PROXY_REDIS_URL"),
        (1 <= s.max_json_depth <= 250, "PROXY_MAX_JSON_DEPTH must be 1..250"),
        (s.max_messages > 0 and s.max_prompts > 0,
         "PROXY_MAX_MESSAGES and PROXY_MAX_PROMPTS must be positive"),
        (s.connect_timeout > 0 and s.read_timeout > 0, "timeouts must be positive"),
        (s.upstream_backoff >= 0, "PROXY_UPSTREAM_BACKOFF must be >= 0"),
        (s.health_interval >= 0, "PROXY_HEALTH_INTERVAL must be >= 0"),
        (s.routing in ROUTING_POLICIES, "PROXY_ROUTING: " + " | ".join(ROUTING_POLICIES)),
        (s.routing_block_size > 0 and s.routing_index_blocks > 0,
         "PROXY_ROUTING_BLOCK_SIZE and PROXY_ROUTING_INDEX_BLOCKS must be positive"),
        (s.routing_load_weight >= 0 and s.routing_load_slack > 0,
         "PROXY_ROUTING_LOAD_WEIGHT must be >= 0, PROXY_ROUTING_LOAD_SLACK > 0"),
        (s.routing_poll_interval >= 0, "PROXY_ROUTING_POLL_INTERVAL must be >= 0"),
        (bool(s.routing_session_header), "PROXY_ROUTING_SESSION_HEADER must not be empty"),
        (s.routing != "kv-events" or len(s.routing_kv_events) == len(s.upstreams),
         "PROXY_ROUTING_KV_EVENTS: one ZMQ endpoint per upstream (PROXY_ROUTING=kv-events)"),
        (s.log_level in ("debug", "info", "warning", "error"), "PROXY_LOG_LEVEL: bad level"),
        (s.cache in ("off", "exact", "semantic"), "PROXY_CACHE: off, exact or semantic"),
        (0.0 < s.cache_threshold <= 1.0, "PROXY_CACHE_THRESHOLD must be in (0, 1]"),
        (0.0 < s.cache_max_false_hit_rate < 1.0,
         "PROXY_CACHE_MAX_FALSE_HIT_RATE must be in (0, 1)"),
        (_judge_model_ok(s.cache_judge_model),
         "PROXY_CACHE_JUDGE_MODEL: mpnet, minilm or a directory with a judge.json"),
        (s.cache_ttl > 0, "PROXY_CACHE_TTL must be positive"),
        (s.cache_max_entries > 0, "PROXY_CACHE_MAX_ENTRIES must be positive"),
        (all(r in ("chat", "completions") or (r.startswith("key:") and len(r) > 4)
             for r in s.cache_exact_only),
         "PROXY_CACHE_EXACT_ONLY: a comma list of chat, completions, key:<identity>"),
    ]
    for ok, message in checks:
        if not ok:
            raise SettingsError(message)
