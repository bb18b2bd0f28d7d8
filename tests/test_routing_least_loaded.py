from proxy.routing.backend import Backend
from proxy.routing.least_loaded import LeastLoaded


def backends(*inflight: int) -> list[Backend]:
    return [Backend(f"http://{i}", inflight=n) for i, n in enumerate(inflight)]


def test_the_least_loaded_wins():
    pool = backends(3, 1, 2)
    assert LeastLoaded(lambda: 0.0).choose(pool, None).backend is pool[1]


def test_ties_take_turns():
    pool = backends(0, 0, 5)
    policy = LeastLoaded(lambda: 0.0)
    picks = [policy.choose(pool, None).backend for _ in range(4)]
    assert picks == [pool[0], pool[1], pool[0], pool[1]]


def test_vllms_queue_counts_while_fresh():
    pool = backends(0, 1)
    pool[0].waiting, pool[0].polled_until = 6, 50.0
    policy = LeastLoaded(lambda: 10.0)
    assert policy.choose(pool, None).backend is pool[1]
    policy.clock = lambda: 60.0
    assert policy.choose(pool, None).backend is pool[0]
