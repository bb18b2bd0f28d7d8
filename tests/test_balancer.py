from proxy.balancer import Balancer
from proxy.routing.protocol import Choice


def pick(b: Balancer, exclude=()):
    choice = b.choose(None, exclude)
    return None if choice is None else choice.backend


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fewest_inflight_wins():
    b = Balancer(("http://a", "http://b", "http://c"), backoff=5, clock=Clock())
    a, bb, c = b.backends
    a.inflight, bb.inflight, c.inflight = 3, 1, 2
    assert pick(b) is bb
    assert pick(b, (bb,)) is c


def test_down_upstreams_are_skipped_until_the_backoff_ends():
    clock = Clock()
    b = Balancer(("http://a", "http://b"), backoff=5, clock=clock)
    a, bb = b.backends
    bb.inflight = 10
    b.mark_down(a, "ConnectError")
    assert pick(b) is bb
    assert [s["state"] for s in b.state()] == ["down", "up"]
    clock.now += 6
    assert pick(b) is a


def test_hold_keeps_a_down_upstream_down_and_leaves_an_up_one_alone():
    clock = Clock()
    b = Balancer(("http://a", "http://b"), backoff=1, clock=clock)
    a, bb = b.backends
    bb.inflight = 10  # a whenever a is up
    b.mark_down(a, "ReadTimeout")
    b.hold(a, 4)  # the health watch: down until the next probe's verdict, not the back-off
    b.hold(bb, 4)
    clock.now += 3
    assert pick(b) is bb and bb.down_until == 0
    b.hold(a, 0.5)  # never shortened
    clock.now += 1.5
    assert pick(b) is a
    b.mark_down(a, "ReadTimeout")
    b.mark_up(a)  # a probe that finds it well ends any hold
    assert [s["state"] for s in b.state()] == ["up", "up"]


def test_all_down_still_tries_the_one_back_soonest():
    clock = Clock()
    b = Balancer(("http://a", "http://b"), backoff=5, clock=clock)
    a, bb = b.backends
    b.mark_down(a, "x")
    clock.now += 1
    b.mark_down(bb, "x")
    assert pick(b) is a
    assert pick(b, (a, bb)) is None
    b.mark_up(bb)
    assert pick(b) is bb and bb.last_error is None


def test_the_policy_sees_only_healthy_upstreams():
    seen = []

    class Spy:
        name, wants_tokens = "spy", False

        async def key(self, request):
            return None

        def choose(self, candidates, key):
            seen.append([b.url for b in candidates])
            return Choice(candidates[-1], affinity=True)

    b = Balancer(("http://a", "http://b", "http://c"), backoff=5, policy=Spy(), clock=Clock())
    b.mark_down(b.backends[1], "x")
    choice = b.choose("k", exclude=(b.backends[2],))
    assert seen == [["http://a"]] and choice.backend is b.backends[0] and choice.affinity
