from proxy.routing.backend import Backend
from proxy.routing.load import LoadGuard, load


def test_load_is_in_flight_until_vllm_numbers_are_fresh():
    b = Backend("http://a", inflight=2, running=5, waiting=3, kv_usage=0.5, polled_until=10.0)
    assert load(b, now=9.0) == 5 + 3 + 0.5
    assert load(b, now=11.0) == 2  # stale: only what this proxy knows
    b.inflight = 9
    assert load(b, now=9.0) == 9 + 3 + 0.5  # this proxy's count when vLLM's lags behind


def test_penalty_is_relative_to_the_least_loaded():
    guard = LoadGuard(weight=1.0, slack=4.0)
    assert guard.penalties([0, 4, 8]) == [0.0, 1.0, 2.0]
    assert guard.penalties([10, 24]) == [0.0, 1.0]  # twice the least plus the slack
    assert LoadGuard(weight=0.0).penalties([0, 100]) == [0.0, 0.0]
