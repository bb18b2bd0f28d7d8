"""Per-key limits: concurrent requests, requests/min, tokens/min; 429 with Retry-After."""

from __future__ import annotations

import pytest

from proxy.limits import KeyLimit, KeyLimited, KeyLimits, LimitsError, parse
from proxy.receive import identity
from proxy.settings import Settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_parse_names_keys_by_identity_and_keeps_the_default(tmp_path) -> None:
    table = parse('{"*": {"rpm": 10}, "sk-a": {"concurrent": 2, "tpm": 500}}')
    assert table == {"*": KeyLimit(rpm=10), identity("sk-a"): KeyLimit(2, None, 500)}
    path = tmp_path / "limits.json"
    path.write_text('{"0123456789abcdef": {"rpm": 1}}')
    assert parse(str(path)) == {"0123456789abcdef": KeyLimit(rpm=1)}
    assert parse(None) == {}


@pytest.mark.parametrize("spec", ['[1]', '{"a": {"rps": 1}}', '{"a": {"rpm": 0}}',
                                  '{"a": {"rpm": true}}', '{"a": 5}', "{nope"])
def test_parse_refuses_bad_limits_without_echoing_the_key(spec: str) -> None:
    with pytest.raises(LimitsError) as err:
        parse(spec)
    assert '"a"' not in str(err.value) and "[a]" not in str(err.value)


def test_concurrent_limit_and_its_release() -> None:
    lim = KeyLimits({"*": KeyLimit(concurrent=2)})
    assert lim.enter("a") and lim.enter("a")
    with pytest.raises(KeyLimited, match="2 concurrent") as err:
        lim.enter("a")
    assert err.value.status == 429 and err.value.headers["Retry-After"] == "1"
    assert lim.enter("b")  # another key has its own count
    lim.leave("a", 0)
    assert lim.enter("a")


def test_requests_per_minute_refill_and_retry_after() -> None:
    clock = Clock()
    refused: list[str] = []
    lim = KeyLimits({"k": KeyLimit(rpm=60)}, on_refuse=refused.append, clock=clock)
    for _ in range(60):
        lim.enter("k")
        lim.leave("k", 0)
    with pytest.raises(KeyLimited, match="60 requests per minute") as err:
        lim.enter("k")
    assert err.value.headers["Retry-After"] == "1" and refused == ["rpm"]
    clock.now += 1.0  # one request's worth refilled
    assert lim.enter("k")
    assert not lim.enter("unlisted")  # no "*": no limit, nothing owed


def test_tokens_per_minute_counts_input_and_output() -> None:
    clock = Clock()
    lim = KeyLimits({"k": KeyLimit(tpm=600)}, clock=clock)
    lim.enter("k")
    lim.charge("k", 500)
    lim.leave("k", 300)  # 200 into debt
    with pytest.raises(KeyLimited, match="600 tokens per minute") as err:
        lim.enter("k")
    assert err.value.headers["Retry-After"] == "20"  # 200 tokens at 10 per second
    clock.now += 21
    assert lim.enter("k")


def test_a_tpm_refusal_takes_no_request_from_the_rpm_bucket() -> None:
    # found by a review: four tpm refusals drained rpm, and the fifth try read "rpm" with a
    # Retry-After of 12 s while the token debt needed 120 s
    clock = Clock()
    lim = KeyLimits({"k": KeyLimit(rpm=5, tpm=100)}, clock=clock)
    lim.enter("k")
    lim.leave("k", 300)  # 200 tokens of debt
    for _ in range(6):
        with pytest.raises(KeyLimited, match="tokens per minute"):
            lim.enter("k")


def test_workers_split_the_limits() -> None:
    lim = KeyLimits({"*": KeyLimit(concurrent=3, rpm=60, tpm=100)}, workers=2)
    assert lim.table["*"] == KeyLimit(2, 30, 50)


async def test_through_the_proxy_429_with_retry_after_and_counted() -> None:
    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="off", api_keys=("sk-a", "sk-b"),
                 key_limits='{"sk-a": {"rpm": 2}}')
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    async with proxy_client(s, transport=fake.transport) as c:
        a = [await c.post("/v1/chat/completions", json=chat,
                          headers={"Authorization": "Bearer sk-a"}) for _ in range(3)]
        b = await c.post("/v1/chat/completions", json=chat,
                         headers={"Authorization": "Bearer sk-b"})
        scrape = (await c.get("/metrics")).text
    assert [r.status_code for r in a] == [200, 200, 429]
    assert int(a[2].headers["Retry-After"]) >= 1
    assert a[2].json()["error"]["code"] == "rate_limit_exceeded"
    assert b.status_code == 200
    assert 'proxy_key_limited_total{limit="rpm"} 1.0' in scrape
