"""Settings read from PROXY_* variables and the serve command's flags (proxy/settings_env.py):
flags over variables, errors naming the variable or flag, unknown variables named."""

import pytest

from proxy.settings import SettingsError
from proxy.settings_env import load_settings, parse_cli


def test_env_then_flags_override():
    env = {"PROXY_UPSTREAM": "http://a:1/, http://b:2", "PROXY_PORT": "9000",
           "PROXY_GREEDY": "off", "PROXY_API_KEYS": "k1,k2", "PROXY_MAX_INPUT_TOKENS": "100",
           "PROXY_INPUT_OVERFLOW": "truncate", "PROXY_CACHE": "off"}
    s = parse_cli(["--port", "9100", "--max-output-tokens", "64"], env)
    assert s.upstreams == ("http://a:1", "http://b:2")
    assert (s.port, s.max_output_tokens, s.greedy, s.api_keys) == (9100, 64, False, ("k1", "k2"))
    assert (s.max_input_tokens, s.input_overflow, s.cache) == (100, "truncate", "off")


def test_a_snapshot_with_workers_is_fine_behind_redis():
    s = load_settings({"PROXY_WORKERS": "2", "PROXY_CACHE_SNAPSHOT": "/tmp/c.jsonl",
                       "PROXY_REDIS_URL": "redis://127.0.0.1:6379/0"})
    assert s.workers == 2


def test_flag_errors_name_the_flag():
    with pytest.raises(SettingsError, match="--max-input-tokens"):
        parse_cli(["--max-input-tokens", "lots"], {})


def test_a_mistyped_variable_is_named_with_the_closest_setting():
    # a reviewer set PROXY_CACHE_REDIS_URL (the setting is PROXY_REDIS_URL) and the proxy
    # silently ran on its in-memory store
    from proxy.settings_env import unknown_env

    got = dict(unknown_env({"PROXY_UPSTREAMS": "x", "PROXY_PORT": "1", "HOME": "/",
                            "PROXY_CACHE_SNAPSHOT": "s", "PROXY_QWXZ_VJK": "1"}))
    assert got == {"PROXY_UPSTREAMS": "PROXY_UPSTREAM", "PROXY_QWXZ_VJK": None}


def test_every_variable_the_proxy_reads_is_known():
    import re
    from pathlib import Path

    from proxy.settings_env import unknown_env

    root = Path(__file__).resolve().parents[1] / "proxy"
    read = {n for p in root.rglob("*.py") for n in re.findall(r'"(PROXY_[A-Z0-9_]+)"',
                                                             p.read_text())}
    assert len(read) > 50 and unknown_env(dict.fromkeys(read, "")) == []
