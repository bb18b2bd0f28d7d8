from proxy.routing.backend import Backend
from proxy.routing.load import LoadGuard
from proxy.routing.protocol import RouteRequest, route_request
from proxy.routing.session import Session


def pool(n: int) -> list[Backend]:
    return [Backend(f"http://r{i}") for i in range(n)]


def policy() -> Session:
    return Session(LoadGuard(weight=1.0, slack=4.0), clock=lambda: 0.0)


def test_the_session_comes_from_the_header_else_the_user_field():
    assert route_request({"x-session-id": "s1"}, {"user": "u"}, "x-session-id", None).session \
        == "s1"
    assert route_request({}, {"user": "u"}, "x-session-id", None).session == "u"
    assert route_request({}, {"user": 3}, "x-session-id", [1]) == RouteRequest(tokens=[1])


async def test_a_session_sticks_and_two_proxies_agree():
    a, b, backends = policy(), policy(), pool(3)
    homes = set()
    for s in range(30):
        k = await a.key(RouteRequest(session=f"s{s}"))
        home = a.choose(backends, k)
        assert home.affinity and b.choose(backends, k).backend is home.backend
        assert a.choose(backends, k).backend is home.backend
        homes.add(home.backend.url)
    assert len(homes) == 3


def test_a_replica_leaving_moves_only_its_own_sessions():
    p, backends = policy(), pool(4)
    before = {s: p.choose(backends, f"s{s}").backend for s in range(200)}
    gone = backends[2]
    after = {s: p.choose([b for b in backends if b is not gone], f"s{s}").backend
             for s in range(200)}
    assert all(after[s] is before[s] for s in before if before[s] is not gone)


def test_a_busy_home_spills_to_the_sessions_next_choice_every_time():
    p, backends = policy(), pool(3)
    home = p.choose(backends, "alice").backend
    home.inflight = 5  # penalty 5/4 > 1
    spilled = {p.choose(backends, "alice").backend for _ in range(5)}
    assert len(spilled) == 1 and home not in spilled
    c = p.choose(backends, "alice")
    assert c.spilled_from is home and not c.affinity


def test_no_session_is_least_loaded():
    p, backends = policy(), pool(2)
    backends[0].inflight = 2
    assert p.choose(backends, None).backend is backends[1]
