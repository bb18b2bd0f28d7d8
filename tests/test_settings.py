import pytest

from proxy.settings import Settings, SettingsError, load_settings, parse_cli


def test_defaults():
    s = load_settings({})
    assert (s.port, s.max_output_tokens, s.greedy, s.api_keys) == (8000, 512, True, ())
    assert s.input_overflow == "reject" and s.cache == "semantic"


def test_env_then_flags_override():
    env = {"PROXY_UPSTREAM": "http://a:1/, http://b:2", "PROXY_PORT": "9000",
           "PROXY_GREEDY": "off", "PROXY_API_KEYS": "k1,k2", "PROXY_MAX_INPUT_TOKENS": "100",
           "PROXY_INPUT_OVERFLOW": "truncate", "PROXY_CACHE": "off"}
    s = parse_cli(["--port", "9100", "--max-output-tokens", "64"], env)
    assert s.upstreams == ("http://a:1", "http://b:2")
    assert (s.port, s.max_output_tokens, s.greedy, s.api_keys) == (9100, 64, False, ("k1", "k2"))
    assert (s.max_input_tokens, s.input_overflow, s.cache) == (100, "truncate", "off")


@pytest.mark.parametrize(("env", "needle"), [
    ({"PROXY_PORT": "x"}, "PROXY_PORT"),
    ({"PROXY_PORT": "70000"}, "PROXY_PORT"),
    ({"PROXY_UPSTREAM": "vllm:8000"}, "PROXY_UPSTREAM"),
    ({"PROXY_UPSTREAM": " , "}, "PROXY_UPSTREAM"),
    ({"PROXY_INPUT_OVERFLOW": "drop"}, "PROXY_INPUT_OVERFLOW"),
    ({"PROXY_MAX_OUTPUT_TOKENS": "0"}, "PROXY_MAX_OUTPUT_TOKENS"),
    ({"PROXY_MAX_INPUT_TOKENS": "-5"}, "PROXY_MAX_INPUT_TOKENS"),
    ({"PROXY_GREEDY": "maybe"}, "PROXY_GREEDY"),
    ({"PROXY_CACHE": "lru"}, "PROXY_CACHE"),
    ({"PROXY_CACHE_THRESHOLD": "1.5"}, "PROXY_CACHE_THRESHOLD"),
    ({"PROXY_CACHE_JUDGE_MODEL": "/no/such/judge"}, "PROXY_CACHE_JUDGE_MODEL"),
    ({"PROXY_ROUTING": "random"}, "PROXY_ROUTING"),
    ({"PROXY_ROUTING_BLOCK_SIZE": "0"}, "PROXY_ROUTING_BLOCK_SIZE"),
    ({"PROXY_ROUTING_LOAD_SLACK": "0"}, "PROXY_ROUTING_LOAD_SLACK"),
    ({"PROXY_UPSTREAM_HEADER": "maybe"}, "PROXY_UPSTREAM_HEADER"),
    ({"PROXY_ROUTING": "kv-events", "PROXY_UPSTREAM": "http://a:1,http://b:2",
      "PROXY_ROUTING_KV_EVENTS": "tcp://a:5557"}, "PROXY_ROUTING_KV_EVENTS"),
    # two workers, one snapshot file: each overwrote it at stop (found by a review)
    ({"PROXY_WORKERS": "2", "PROXY_CACHE_SNAPSHOT": "/tmp/c.jsonl"}, "PROXY_CACHE_SNAPSHOT"),
])
def test_invalid_settings_name_the_setting(env, needle):
    with pytest.raises(SettingsError, match=needle):
        load_settings(env)


def test_a_snapshot_with_workers_is_fine_behind_redis():
    s = load_settings({"PROXY_WORKERS": "2", "PROXY_CACHE_SNAPSHOT": "/tmp/c.jsonl",
                       "PROXY_REDIS_URL": "redis://127.0.0.1:6379/0"})
    assert s.workers == 2


def test_flag_errors_name_the_flag():
    with pytest.raises(SettingsError, match="--max-input-tokens"):
        parse_cli(["--max-input-tokens", "lots"], {})


def test_settings_are_frozen():
    s = Settings()
    with pytest.raises(AttributeError):
        s.port = 1  # type: ignore[misc]


def test_exact_only_rules():
    s = load_settings({"PROXY_CACHE_EXACT_ONLY": "chat,key:0123abcd"})
    assert s.cache_exact_only == ("chat", "key:0123abcd")
    with pytest.raises(SettingsError, match="PROXY_CACHE_EXACT_ONLY"):
        load_settings({"PROXY_CACHE_EXACT_ONLY": "embeddings"})


def test_judge_model_takes_a_bundled_name_in_any_case():
    assert load_settings({"PROXY_CACHE_JUDGE_MODEL": "MiniLM"}).cache_judge_model == "MiniLM"
    assert load_settings({}).cache_judge_model == "mpnet"


def test_a_mistyped_variable_is_named_with_the_closest_setting():
    # a reviewer set PROXY_CACHE_REDIS_URL (the setting is PROXY_REDIS_URL) and the proxy
    # silently ran on its in-memory store
    from proxy.settings import unknown_env

    got = dict(unknown_env({"PROXY_UPSTREAMS": "x", "PROXY_PORT": "1", "HOME": "/",
                            "PROXY_CACHE_SNAPSHOT": "s", "PROXY_QWXZ_VJK": "1"}))
    assert got == {"PROXY_UPSTREAMS": "PROXY_UPSTREAM", "PROXY_QWXZ_VJK": None}


def test_every_variable_the_proxy_reads_is_known():
    import re
    from pathlib import Path

    from proxy.settings import unknown_env

    root = Path(__file__).resolve().parents[1] / "proxy"
    read = {n for p in root.rglob("*.py") for n in re.findall(r'"(PROXY_[A-Z0-9_]+)"',
                                                             p.read_text())}
    assert len(read) > 50 and unknown_env(dict.fromkeys(read, "")) == []
