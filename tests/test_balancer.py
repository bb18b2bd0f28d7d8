from proxy.balancer import Balancer


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fewest_inflight_wins():
    b = Balancer(("http://a", "http://b", "http://c"), backoff=5, clock=Clock())
    a, bb, c = b.backends
    a.inflight, bb.inflight, c.inflight = 3, 1, 2
    assert b.pick() is bb
    assert b.pick(exclude=(bb,)) is c


def test_down_upstreams_are_skipped_until_the_backoff_ends():
    clock = Clock()
    b = Balancer(("http://a", "http://b"), backoff=5, clock=clock)
    a, bb = b.backends
    bb.inflight = 10
    b.mark_down(a, "ConnectError")
    assert b.pick() is bb
    assert [s["state"] for s in b.state()] == ["down", "up"]
    clock.now += 6
    assert b.pick() is a


def test_all_down_still_tries_the_one_back_soonest():
    clock = Clock()
    b = Balancer(("http://a", "http://b"), backoff=5, clock=clock)
    a, bb = b.backends
    b.mark_down(a, "x")
    clock.now += 1
    b.mark_down(bb, "x")
    assert b.pick() is a
    assert b.pick(exclude=(a, bb)) is None
    b.mark_up(bb)
    assert b.pick() is bb and bb.last_error is None
