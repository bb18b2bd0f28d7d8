"""The Settings object's defaults and checks (proxy/settings.py), given as PROXY_*
variables."""

import pytest

from proxy.settings import Settings, SettingsError
from proxy.settings_env import load_settings


def test_defaults():
    s = load_settings({})
    assert (s.port, s.max_output_tokens, s.greedy, s.api_keys) == (8000, 512, True, ())
    assert s.input_overflow == "reject" and s.cache == "semantic"


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
