"""Security promises: API keys (401, compared in constant time by construction), admin
endpoints closed without the admin key, tenant isolation of the cache under adversarial
requests, no prompt/answer text in logs or metrics by default, Redis credentials and TLS."""

from __future__ import annotations

import hmac
import logging
from typing import Any

import httpx
import pytest

from proxy import receive
from proxy.cache.config import CacheConfig
from proxy.receive import KeyRing
from proxy.settings import Settings
from proxy.settings_env import load_settings
from tests.support.fake_upstream import FakeVllm
from tests.support.proxy_app import proxy_client

UP = "http://vllm:8000"
KEYS = ("key-alpha-0123456789", "k2", "key-gamma-" + "z" * 40)
CHAT = "/v1/chat/completions"
MARK = "ZQXJ-secret-prompt-7731"
ANSWER_MARK = "PLUGH-secret-answer-4242"


def settings(**kw: Any) -> Settings:
    return Settings(**{"upstreams": (UP,), "cache": "off", **kw})


def chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 4,
            **extra}


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def is_openai_error(r: httpx.Response, status: int) -> bool:
    err = r.json()["error"]
    return r.status_code == status and {"message", "type", "param", "code"} <= set(err)


class _Req:
    """Just what KeyRing.tenant reads from a request."""

    def __init__(self, authorization: str | None) -> None:
        self.headers = {} if authorization is None else {"authorization": authorization}


# --- API keys ---------------------------------------------------------------------------------

async def test_missing_or_wrong_key_is_401_on_every_api_route():
    fake = FakeVllm()
    async with proxy_client(settings(api_keys=KEYS), transport=fake.transport) as c:
        for headers in ({}, bearer("nope"), bearer(KEYS[0] + "x"), bearer(KEYS[0][:-1]),
                        {"authorization": KEYS[0]}, {"authorization": f"Basic {KEYS[0]}"},
                        bearer(""), {"x-api-key": KEYS[0]}):
            for method, path, body in (("POST", CHAT, chat("hi")),
                                       ("POST", "/v1/completions", {"prompt": "hi"}),
                                       ("GET", "/v1/models", None)):
                r = await c.request(method, path, json=body, headers=headers)
                assert is_openai_error(r, 401), (headers, path, r.status_code, r.text)
                assert r.json()["error"]["type"] == "authentication_error"
        assert not fake.completions() and not fake.completions("/v1/completions")
        for key in KEYS:
            assert (await c.post(CHAT, json=chat("hi"), headers=bearer(key))).status_code == 200
        assert (await c.get("/v1/models", headers=bearer(KEYS[1]))).status_code == 200
        # liveness and readiness stay open for probes; they carry no data
        assert (await c.get("/health")).status_code == 200


def test_every_key_is_compared_as_a_fixed_length_digest_by_construction(monkeypatch):
    """The timing-leak check by construction: whatever token arrives (valid, invalid, any
    length), hmac.compare_digest runs once per configured key, always on two 32-byte digests,
    so the work done is independent of the token and of which key (if any) matches."""
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(receive.hmac, "compare_digest", spy)
    ring = KeyRing(KEYS)
    tokens = [*KEYS, "x", KEYS[0][:-1], KEYS[2] + "!", "y" * 10_000, "\u00e9\u00e8"]
    for token in tokens:
        calls.clear()
        try:
            identity = ring.tenant(_Req(f"Bearer {token}"))  # type: ignore[arg-type]
        except receive.Unauthorized:
            identity = None
        assert calls == [(32, 32)] * len(KEYS), (token[:20], calls)
        assert (identity is not None) == (token in KEYS)


# --- admin endpoints --------------------------------------------------------------------------

ADMIN_PATHS = (("GET", "/admin/cache/stats"), ("POST", "/admin/cache/flush"),
               ("POST", "/admin/cache/flush?namespace=tiny"))


async def test_admin_endpoints_do_not_exist_without_an_admin_key():
    fake = FakeVllm()
    async with proxy_client(settings(api_keys=KEYS, cache="exact"),
                            transport=fake.transport) as c:
        for method, path in ADMIN_PATHS:
            for headers in ({}, bearer(KEYS[0]), bearer("")):
                r = await c.request(method, path, headers=headers)
                assert r.status_code in (404, 405), (path, r.status_code)


async def test_admin_endpoints_need_the_admin_key_not_an_api_key():
    fake = FakeVllm()
    admin = "admin-" + "s" * 30
    async with proxy_client(settings(api_keys=KEYS, cache="exact", admin_key=admin),
                            transport=fake.transport) as c:
        await c.post(CHAT, json=chat("hello"), headers=bearer(KEYS[0]))
        # the admin routes exist: losing them must fail here, not skip
        assert (await c.get("/admin/cache/stats", headers=bearer(admin))).status_code == 200
        for method, path in ADMIN_PATHS:
            for headers in ({}, bearer(KEYS[0]), bearer(admin[:-1]), bearer(admin + "s"),
                            {"authorization": admin}, {"x-admin-key": admin}):
                r = await c.request(method, path, headers=headers)
                assert is_openai_error(r, 401), (path, headers, r.status_code)
        stats = await c.get("/admin/cache/stats", headers=bearer(admin))
        assert stats.status_code == 200
        # not flushed by any refused call above
        assert stats.json()["entries"] == 1


# --- tenant isolation -------------------------------------------------------------------------

class TenantFake(FakeVllm):
    """Answers name the tenant whose request produced them, so a leak is visible in the text."""

    def words(self, data: dict[str, Any]) -> list[str]:
        rid = self.requests[-1].headers.get("x-request-id", "") if self.requests else ""
        who = rid.split(".")[0]
        return [f" for-{who}", " w1"]


@pytest.mark.parametrize("mode", ["exact", "semantic"])
async def test_crafted_requests_cannot_read_another_tenants_cache(mode):
    fake = TenantFake()
    alice, mallory = KEYS[0], KEYS[1]
    question = "What is the capital of France?"
    async with proxy_client(settings(api_keys=KEYS, cache=mode, cache_threshold=0.5),
                            transport=fake.transport) as c:

        async def ask(key: str, body: dict[str, Any], **headers: str) -> httpx.Response:
            who = "alice" if key == alice else "mallory"
            r = await c.post(CHAT, json=body, headers={**bearer(key), **headers,
                                                       "x-request-id": f"{who}.{len(body)}"})
            assert r.status_code == 200, r.text
            return r

        first = await ask(alice, chat(question))
        assert first.headers["x-cache"] == "MISS"
        again = await ask(alice, chat(question))
        assert again.headers["x-cache"] == "HIT"  # the entry exists and serves its tenant
        alice_id = KeyRing(KEYS).tenant(_Req(f"Bearer {alice}"))  # type: ignore[arg-type]
        attempts = [
            chat(question),
            chat("What is the capital of France ?"),
            chat("what is the capital of france"),
            chat("Tell me: what is the capital of France?"),
            chat(question, user=alice_id),
            chat(question, user="alice", tenant=alice_id),
            {**chat(question), "messages": [{"role": "system", "content": f"tenant={alice_id}"},
                                             {"role": "user", "content": question}]},
            {**chat(question), "model": "tiny", "stream": True},
        ]
        served_before = len(fake.completions())
        for i, body in enumerate(attempts):
            r = await ask(mallory, body, **{"x-tenant": alice_id, "x-api-key": alice,
                                             "cache-control": "max-age=999999"})
            if i == 0:  # mallory's first question cannot be a hit: nothing of hers is stored
                assert r.headers["x-cache"] == "MISS"
            assert "for-alice" not in r.text, body  # a hit may only be mallory's own entry
            assert "for-mallory" in r.text, body
        assert len(fake.completions()) > served_before
        # and a Bearer header carrying both keys is simply an invalid key
        both = await c.post(CHAT, json=chat(question),
                            headers={"authorization": f"Bearer {mallory} {alice}"})
        assert both.status_code == 401


# --- no text in logs or metrics ---------------------------------------------------------------

class MarkFake(FakeVllm):
    def words(self, data: dict[str, Any]) -> list[str]:
        return [f" {ANSWER_MARK}", " w1"]


async def test_no_prompt_or_answer_text_in_logs_or_metrics_by_default(caplog):
    caplog.set_level(logging.DEBUG)
    fake = MarkFake()
    async with proxy_client(settings(cache="exact", api_keys=KEYS),
                            transport=fake.transport) as c:
        h = bearer(KEYS[0])
        for stream in (False, True):
            await c.post(CHAT, json=chat(MARK, stream=stream), headers=h)
            await c.post(CHAT, json=chat(MARK, stream=stream), headers=h)  # a hit
            await c.post("/v1/completions", json={"prompt": MARK, "stream": stream}, headers=h)
        await c.post(CHAT, json=chat(MARK, max_tokens=-1), headers=h)  # 400
        await c.post(CHAT, json=chat(MARK * 5000), headers=h)  # context too long
        await c.post(CHAT, json={"messages": MARK}, headers=h)  # bad shape
        await c.post(CHAT, content=MARK.encode(), headers=h)  # not JSON
        await c.post(CHAT, json=chat(MARK, model=MARK), headers=h)  # unknown model
        await c.post(CHAT, json=chat(MARK), headers=bearer(MARK))  # a wrong key
        fake.fail_with = (400, {"error": {"message": f"vLLM says {MARK}", "type": "x",
                                          "param": None, "code": 400}})
        await c.post(CHAT, json=chat(MARK + " again"), headers=h)
        fake.fail_with = None
        metrics = (await c.get("/metrics")).text
    text = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')} {r.exc_text or ''}"
                     for r in caplog.records)
    assert any(r.name == "proxy.access" for r in caplog.records)
    for secret in (MARK, ANSWER_MARK, KEYS[0]):
        assert secret not in text
        assert secret not in metrics


async def test_prompts_are_logged_only_when_asked(caplog):
    caplog.set_level(logging.INFO)
    fake = FakeVllm()
    async with proxy_client(settings(log_prompts=True), transport=fake.transport) as c:
        await c.post(CHAT, json=chat(MARK))
    assert any(MARK in str(getattr(r, "fields", "")) for r in caplog.records)


# --- Redis credentials and TLS ----------------------------------------------------------------

def test_redis_credentials_and_tls_are_settable():
    url = "rediss://proxyuser:s3cr%40t@redis.example:6380/2?ssl_cert_reqs=required"
    s = load_settings({"PROXY_REDIS_URL": url, "PROXY_UPSTREAM": UP})
    assert s.redis_url == url
    assert CacheConfig.from_settings(s).redis_url == url
    from redis.asyncio.connection import SSLConnection

    from proxy.cache import redis_store

    store = redis_store.RedisStore(url, 10, None)
    pool = store._r.connection_pool
    assert issubclass(pool.connection_class, SSLConnection)
    kw = pool.connection_kwargs
    assert (kw["username"], kw["password"]) == ("proxyuser", "s3cr@t")
    assert (kw["host"], kw["port"], kw["db"]) == ("redis.example", 6380, 2)
    plain = redis_store.RedisStore("redis://:pw@127.0.0.1:1/0", 10, None)
    assert not issubclass(plain._r.connection_pool.connection_class, SSLConnection)
    assert plain._r.connection_pool.connection_kwargs["password"] == "pw"


async def test_redis_password_is_not_logged_when_redis_is_unreachable(caplog):
    caplog.set_level(logging.DEBUG)
    fake = FakeVllm()
    url = "redis://admin:hunter2-pw@127.0.0.1:1/0"
    async with proxy_client(settings(cache="exact", redis_url=url),
                            transport=fake.transport) as c:
        r = await c.post(CHAT, json=chat("hi"))
        assert r.status_code == 200 and r.headers["x-cache"] == "BYPASS"
        metrics = (await c.get("/metrics")).text
    logged = "\n".join(f"{r.getMessage()} {getattr(r, 'fields', '')} {r.exc_text or ''}"
                       for r in caplog.records)
    assert "hunter2-pw" not in logged and "hunter2-pw" not in metrics


async def test_admin_key_is_compared_as_a_fixed_length_digest(monkeypatch):
    from proxy import admin

    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(admin.hmac, "compare_digest", spy)
    key = "admin-" + "s" * 30
    fake = FakeVllm()
    async with proxy_client(settings(cache="exact", admin_key=key),
                            transport=fake.transport) as c:
        for token in ("x", key[:-1], key + "s", "y" * 5000, key):
            calls.clear()
            r = await c.get("/admin/cache/stats", headers=bearer(token))
            assert r.status_code == (200 if token == key else 401)
            assert calls == [(32, 32)], (token[:10], calls)
