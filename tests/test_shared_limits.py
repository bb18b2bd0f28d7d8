"""Per-key limits held across workers through Redis (two limiters = two workers or replicas)."""

import asyncio

import pytest

from proxy.limits import KeyLimit, KeyLimited, KeyLimits
from proxy.shared_limits import SharedKeyLimits
from tests.support.waiting import wait_for_async

pytestmark = pytest.mark.redis


def pair(url: str, table: dict[str, KeyLimit], lease_s: float = 30.0,
         workers: int = 2) -> tuple[SharedKeyLimits, SharedKeyLimits, list[str]]:
    refused: list[str] = []
    made = [SharedKeyLimits(KeyLimits(table, workers, refused.append), table, url,
                            lease_s=lease_s) for _ in range(2)]
    return made[0], made[1], refused


async def settle(*limits: SharedKeyLimits) -> None:
    for lim in limits:
        await asyncio.gather(*lim._jobs)


async def test_a_rate_holds_across_workers_not_per_worker(redis):
    a, b, refused = pair(redis.url, {"*": KeyLimit(rpm=4)})
    leases = [await (a if i % 2 else b).admit("t1") for i in range(4)]
    assert all(leases)
    with pytest.raises(KeyLimited) as err:
        await a.admit("t1")
    assert err.value.headers["Retry-After"] == "15"  # one request refills in 60 / 4 s
    assert refused == ["rpm"]
    assert await a.admit("t2")  # another key has its own bucket
    # the local limiter alone would have let 2 through per worker only: 4 in all, both ways,
    # but a client on one worker's connection would have got 2
    local = KeyLimits({"*": KeyLimit(rpm=4)}, 2)
    assert local.enter("t1") and local.enter("t1")
    with pytest.raises(KeyLimited):
        local.enter("t1")
    await a.aclose()
    await b.aclose()


async def test_concurrency_leases_are_shared_and_handed_back(redis):
    a, b, refused = pair(redis.url, {"*": KeyLimit(concurrent=2)})
    first, second = await a.admit("t"), await b.admit("t")
    assert first and second
    with pytest.raises(KeyLimited):
        await a.admit("t")
    assert refused == ["concurrent"]
    b.release("t", second, 0)
    await settle(b)
    assert await a.admit("t")
    await a.aclose()
    await b.aclose()


async def test_tokens_put_a_key_in_debt_across_workers(redis):
    a, b, refused = pair(redis.url, {"*": KeyLimit(tpm=600)})
    lease = await a.admit("t")
    assert lease
    await a.spend("t", lease, 400)
    a.release("t", lease, 500)  # 900 of 600: 300 in debt, repaid at 10 a second
    await settle(a)
    with pytest.raises(KeyLimited) as err:
        await b.admit("t")
    assert 25 <= int(err.value.headers["Retry-After"]) <= 31
    assert refused == ["tpm"]
    await a.aclose()
    await b.aclose()


async def test_a_dead_workers_leases_expire(redis):
    a, b, _ = pair(redis.url, {"*": KeyLimit(concurrent=1)}, lease_s=0.5)
    assert await a.admit("t")
    await a.aclose()  # gone without handing its lease back (and no longer extending it)
    with pytest.raises(KeyLimited):
        await b.admit("t")

    async def admitted() -> bool:
        try:
            return bool(await b.admit("t"))
        except KeyLimited:
            return False

    await wait_for_async(admitted, "the dead worker's lease expires (0.5 s)", 5)
    await b.aclose()


async def test_a_living_workers_leases_are_extended(redis):
    a, b, _ = pair(redis.url, {"*": KeyLimit(concurrent=1)}, lease_s=0.3)
    lease = await a.admit("t")
    assert lease
    # 0.9 s: three lease times, each extended by a's own task. Time let pass on purpose: what
    # is shown is that the lease does NOT expire, so there is no event to wait for
    for _ in range(6):
        await asyncio.sleep(0.15)
        with pytest.raises(KeyLimited):
            await b.admit("t")
    a.release("t", lease, 0)
    await settle(a)
    assert await b.admit("t")
    await a.aclose()
    await b.aclose()


async def test_redis_down_falls_back_to_this_workers_share(redis):
    fallbacks: list[int] = []
    table = {"*": KeyLimit(rpm=4)}
    lim = SharedKeyLimits(KeyLimits(table, 2), table, redis.url,
                          on_fallback=lambda: fallbacks.append(1))
    redis.stop()
    assert (await lim.admit("t")).startswith("local:")
    assert await lim.admit("t")
    with pytest.raises(KeyLimited):  # the local share: 4 / 2 workers
        await lim.admit("t")
    assert len(fallbacks) == 3
    await lim.aclose()


async def test_two_proxy_workers_share_one_limit_end_to_end(redis):
    from proxy.settings import Settings
    from tests.support.fake_upstream import FakeVllm
    from tests.support.proxy_app import proxy_client

    fake = FakeVllm()
    s = Settings(upstreams=("http://vllm:8000",), cache="off", api_keys=("sk-a",), workers=2,
                 key_limits='{"sk-a": {"rpm": 3}}', key_limits_shared=True,
                 redis_url=redis.url)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
    auth = {"Authorization": "Bearer sk-a"}
    async with proxy_client(s, transport=fake.transport) as one, \
            proxy_client(s, transport=fake.transport) as two:
        codes = [(await (one if i % 2 else two).post("/v1/chat/completions", json=chat,
                                                      headers=auth)).status_code
                 for i in range(4)]
    # 3 a minute for the key across both workers (split, each would hold 1.5: 200 200 429 429)
    assert codes == [200, 200, 200, 429]


def test_shared_limits_need_redis():
    from proxy.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match="PROXY_KEY_LIMITS_SHARED needs PROXY_REDIS_URL"):
        Settings(upstreams=("http://vllm:8000",), key_limits_shared=True)
