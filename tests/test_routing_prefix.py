from proxy.routing.backend import Backend
from proxy.routing.blocks import chain
from proxy.routing.load import LoadGuard
from proxy.routing.prefix import BlockSet, Prefix
from proxy.routing.protocol import RouteRequest

BS = 4


def tenant(t: int, blocks: int = 4, question: int = 0) -> list[int]:
    """A tenant's system prompt (`blocks` full blocks), then a question of its own."""
    return [1000 * t + i for i in range(blocks * BS)] + [7, question, question]


def policy(**kw) -> Prefix:
    return Prefix(BS, kw.pop("capacity", 1000), LoadGuard(**kw), clock=lambda: 0.0)


async def key(p: Prefix, tokens: list[int]) -> object:
    return await p.key(RouteRequest(tokens=tokens))


def pool(n: int = 2) -> list[Backend]:
    return [Backend(f"http://r{i}") for i in range(n)]


def test_block_set_matches_an_unbroken_prefix_and_drops_tails_first():
    s = BlockSet(capacity=5)
    s.add([1, 2, 3, 4])
    assert s.matched([1, 2, 3, 4, 9]) == 4 and s.matched([1, 9, 3]) == 1
    s.add([5, 6])
    assert len(s.blocks) == 5
    assert s.matched([1, 2, 3, 4]) == 3  # the LRU took the old chain's last block
    s.discard([1])
    assert s.matched([1, 2]) == 0


async def test_a_tenant_sticks_to_one_replica_and_tenants_spread():
    p, backends = policy(), pool()
    first = {}
    for t in range(20):
        c = p.choose(backends, await key(p, tenant(t)))
        assert not c.affinity and c.spilled_from is None
        first[t] = c.backend
    assert len(set(first.values())) == 2  # new prefixes spread (rendezvous tie-break)
    for t in range(20):
        c = p.choose(backends, await key(p, tenant(t, question=5)))
        assert c.backend is first[t] and c.affinity


async def test_two_proxies_that_never_talked_place_new_prefixes_alike():
    a, b, backends = policy(), policy(), pool(3)
    for t in range(10):
        k = await key(a, tenant(t))
        assert a.choose(backends, k).backend is b.choose(backends, k).backend


async def test_the_longest_cached_prefix_wins():
    p, backends = policy(), pool()
    k = await key(p, tenant(1, blocks=4))
    home = p.choose(backends, k).backend
    other = next(b for b in backends if b is not home)
    p.blocks_of(other).add(k[:2])
    assert p.choose(backends, k).backend is home
    p.blocks_of(home).discard(k[1:])  # home now holds 1 block, other 2
    assert p.choose(backends, k).backend is other


async def test_a_busy_home_spills_and_the_prefix_then_lives_on_both():
    p, backends = policy(weight=1.0, slack=4.0), pool()
    k = await key(p, tenant(3))
    home = p.choose(backends, k).backend
    other = next(b for b in backends if b is not home)
    home.inflight = 3  # penalty 3/4 < gain 1: stays
    assert p.choose(backends, k).backend is home
    home.inflight = 5  # penalty 5/4 > gain 1: spills
    c = p.choose(backends, k)
    assert c.backend is other and c.spilled_from is home and not c.affinity
    home.inflight = 1
    c = p.choose(backends, k)
    assert c.backend is other and c.affinity  # both hold it: the less loaded one serves


async def test_vllms_own_queue_makes_a_replica_busy():
    p, backends = policy(), pool()
    k = await key(p, tenant(4))
    home = p.choose(backends, k).backend
    home.waiting, home.running, home.polled_until = 10, 8, 1.0  # other proxies' traffic
    assert p.choose(backends, k).backend is not home


async def test_no_full_block_falls_back_to_least_loaded():
    p, backends = policy(), pool()
    assert await key(p, [1, 2]) == [] and await p.key(RouteRequest()) is None
    backends[0].inflight = 1
    assert p.choose(backends, None).backend is backends[1]
    assert p.choose(backends, []).backend is backends[1]


async def test_the_index_is_bounded_per_replica():
    p, backends = policy(capacity=8), pool(1)
    for t in range(10):
        p.choose(backends, await key(p, tenant(t)))
    assert len(p.blocks_of(backends[0]).blocks) == 8
    assert chain(tenant(9), BS)[0] in p.blocks_of(backends[0]).blocks


async def test_a_hot_prefix_under_load_ends_up_balanced():
    """Most traffic on one prefix, every request in flight for 6 ticks, 2 arrivals a tick:
    affinity alone would pile everything onto one replica; the guard spills it, and once both
    hold the prefix, load decides."""
    p, backends = policy(weight=1.0, slack=4.0), pool()
    hot = await key(p, tenant(0))
    cold = [await key(p, tenant(t)) for t in range(1, 11)]
    active: list[tuple[int, Backend]] = []
    served = {b.url: 0 for b in backends}
    for tick in range(300):
        for _, b in [a for a in active if a[0] == tick]:
            b.inflight -= 1
        active = [a for a in active if a[0] > tick]
        for i in range(2):
            k = cold[(tick + i) % 10] if (tick * 2 + i) % 5 == 0 else hot  # 80 % hot
            b = p.choose(backends, k).backend
            b.inflight += 1
            served[b.url] += 1
            active.append((tick + 6, b))
    counts = sorted(served.values())
    assert counts[1] / counts[0] <= 1.5, served


async def test_a_replica_that_refused_forgets_the_chain_it_was_given():
    # a review: the chain stayed recorded on a replica that refused the connection (or whose
    # engine died), so once that replica was back the prompt went there, to an empty cache
    p = Prefix(block_size=4, capacity=1000, guard=LoadGuard(), clock=lambda: 0.0)
    a, b = Backend("http://a"), Backend("http://b")
    key = await p.key(RouteRequest(tokens=list(range(40))))
    first = p.choose([a, b], key)
    p.refused(first, key)
    other = (first.backend is a and b) or a
    second = p.choose([other], key)  # the retry: the other replica takes the chain
    assert second.backend is other
    assert p.blocks_of(first.backend).matched(key) == 0
    assert p.choose([a, b], key).backend is other  # both up again: where the chain is
