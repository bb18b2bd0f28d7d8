import asyncio

from proxy.balancer import Balancer
from proxy.errors import UpstreamUnavailable
from proxy.metrics import Metrics
from proxy.routing.backend import Backend
from proxy.routing.build import background
from proxy.routing.poller import LoadPoller, parse_load
from proxy.settings import Settings
from tests.support.fake_upstream import FakeReply, FakeTransport

TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 7.0
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 99.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.5
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 1234.0
"""


def test_parse_sums_engines_and_takes_the_fullest_kv_cache():
    load = parse_load(TEXT)
    assert (load.running, load.waiting, load.kv_usage) == (5.0, 7.0, 0.5)
    assert parse_load("vllm:gpu_cache_usage_perc 0.75\n").kv_usage == 0.75
    assert parse_load("garbage\nvllm:num_requests_waiting{x} nan?\n").waiting == 0.0
    # a broken exporter's NaN / inf / negative gauges are skipped: NaN made every routing
    # score NaN and each request a 500 (ZeroDivisionError, StopIteration; found by a review)
    odd = parse_load("vllm:num_requests_waiting NaN\nvllm:num_requests_running +Inf\n"
                     "vllm:kv_cache_usage_perc -1\nvllm:num_requests_running 2\n")
    assert (odd.running, odd.waiting, odd.kv_usage) == (2.0, 0.0, 0.0)


async def test_poll_fills_the_backend_and_counts_failures():
    async def answer(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        if url.startswith("http://down:2"):
            raise UpstreamUnavailable("the upstream http://down:2 is unreachable: refused")
        return FakeReply(200, TEXT.encode())

    balancer = Balancer(("http://up:1", "http://down:2"), backoff=1)
    metrics = Metrics()
    poller = LoadPoller(FakeTransport(answer), balancer, metrics, interval=1.0,
                        clock=lambda: 100.0)
    up, down = balancer.backends
    for b in balancer.backends:
        await poller.poll(b)
    assert (up.running, up.waiting, up.kv_usage, up.polled_until) == (5.0, 7.0, 0.5, 103.0)
    assert down.polled_until == 0.0
    assert 'proxy_routing_poll_errors_total{upstream="http://down:2"} 1.0' in \
        metrics.render().decode()


async def test_a_non_200_metrics_page_is_a_failed_poll_and_keeps_the_old_load():
    async def answer(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        return FakeReply(503, TEXT.encode())

    balancer = Balancer(("http://busy:1",), backoff=1)
    metrics = Metrics()
    poller = LoadPoller(FakeTransport(answer), balancer, metrics, interval=1.0,
                        clock=lambda: 100.0)
    (b,) = balancer.backends
    await poller.poll(b)
    assert (b.running, b.polled_until) == (0.0, 0.0)
    assert 'proxy_routing_poll_errors_total{upstream="http://busy:1"} 1.0' in \
        metrics.render().decode()


LIMIT = 64 * 1024
JUNK = b"x" * 4096


class EndlessMetrics(FakeReply):
    """A /metrics page that never ends: a real first line, four times LIMIT of junk, then it
    waits forever (a read without a bound never returns). close() is signalled."""

    def __init__(self) -> None:
        junks = 4 * LIMIT // len(JUNK)
        super().__init__(200, events=[TEXT.encode(), *[JUNK] * junks],
                         pause=(junks, asyncio.Event()))  # before the last: never set
        self.done = asyncio.Event()

    def close(self) -> None:
        super().close()
        self.done.set()


async def test_an_endless_metrics_page_is_cut_at_the_limit_and_counted():
    reply = EndlessMetrics()

    async def answer(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        return reply

    balancer = Balancer(("http://endless:1",), backoff=1)
    metrics = Metrics()
    poller = LoadPoller(FakeTransport(answer), balancer, metrics, interval=1.0,
                        clock=lambda: 100.0, max_answer_bytes=LIMIT)
    (b,) = balancer.backends
    async with asyncio.timeout(10):
        await poller.poll(b)
    assert reply.closed  # the connection dropped, the rest never read
    assert (b.running, b.polled_until) == (0.0, 0.0)  # a failed poll: the old load kept
    text = metrics.render().decode()
    assert 'proxy_routing_poll_errors_total{upstream="http://endless:1"} 1.0' in text
    assert 'proxy_answers_too_large_total{upstream="http://endless:1"} 1.0' in text


async def test_the_built_poller_reads_to_the_settings_limit():
    s = Settings(upstreams=("http://a:1", "http://b:1"), routing="prefix",
                 routing_poll_interval=60.0, health_interval=0, max_answer_bytes=LIMIT)
    replies = {url: EndlessMetrics() for url in s.upstreams}

    async def answer(method: str, url: str, headers: dict[str, str], body: bytes) -> FakeReply:
        return replies[url.removesuffix("/metrics")]

    async def probe(backend: Backend, wait: float) -> bool:
        return True

    balancer = Balancer(s.upstreams, backoff=1)
    metrics = Metrics()
    (work,) = background(s, balancer, FakeTransport(answer), metrics, probe)
    task = asyncio.ensure_future(work)
    try:
        async with asyncio.timeout(10):
            await asyncio.gather(*(r.done.wait() for r in replies.values()))
    finally:
        task.cancel()
    text = metrics.render().decode()
    assert all(f'proxy_answers_too_large_total{{upstream="{url}"}} 1.0' in text
               for url in s.upstreams)
