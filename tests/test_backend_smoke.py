import httpx
import pytest

pytestmark = pytest.mark.vllm


def test_real_vllm_answers_greedy_deterministically(vllm):
    body = {"model": vllm.model, "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 8, "temperature": 0}
    a = httpx.post(vllm.url + "/v1/chat/completions", json=body, timeout=60).json()
    b = httpx.post(vllm.url + "/v1/chat/completions", json=body, timeout=60).json()
    assert a["usage"]["completion_tokens"] == 8
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
