import asyncio

import msgspec
import zmq
import zmq.asyncio

from proxy.routing.backend import Backend
from proxy.routing.blocks import chain
from proxy.routing.kv_events import KvEvents, Reported
from proxy.routing.load import LoadGuard
from proxy.routing.protocol import RouteRequest
from tests.support.procs import free_port
from tests.support.waiting import wait_for_async

BS = 4
TOKENS = [*range(100, 100 + 4 * BS), 1, 2]  # 4 full blocks and a partial one


def stored(vllm_hashes, parent, tokens):
    return {"type": "BlockStored", "block_hashes": vllm_hashes, "parent_block_hash": parent,
            "token_ids": tokens, "block_size": BS, "lora_id": None, "medium": "GPU",
            "lora_name": None}


def batch(*events):
    return [1.0, list(events), 0]


def test_reported_blocks_rebuild_the_requests_chain_and_follow_evictions():
    r = Reported(BS)
    ours = chain(TOKENS, BS)
    r.apply(0, batch(stored([b"h1", b"h2"], None, TOKENS[:2 * BS])))
    r.apply(1, batch(stored([b"h3", b"h4"], b"h2", TOKENS[2 * BS:4 * BS])))
    assert r.matched(ours) == 4
    r.apply(2, batch({"type": "BlockRemoved", "block_hashes": [b"h3"], "medium": "GPU"}))
    assert r.matched(ours) == 2
    r.apply(3, batch({"type": "AllBlocksCleared"}))
    assert r.matched(ours) == 0


def test_unknown_parents_wrong_block_sizes_and_sequence_gaps_are_not_trusted():
    r = Reported(BS)
    ours = chain(TOKENS, BS)
    r.apply(0, batch(stored([b"h3"], b"never-seen", TOKENS[2 * BS:3 * BS])))
    assert not r.held
    r.apply(1, batch({**stored([b"h1"], None, TOKENS[:8]), "block_size": 8}))
    assert not r.held
    r.apply(2, batch(stored([b"h1", b"h2"], None, TOKENS[:2 * BS])))
    assert r.matched(ours) == 2
    r.apply(5, batch())  # 3 and 4 were lost
    assert r.matched(ours) == 0


def test_sent_but_unreported_blocks_count_until_vllm_speaks():
    r = Reported(BS)
    ours = chain(TOKENS, BS)
    r.add(ours)
    assert r.matched(ours) == 4


async def test_the_policy_routes_to_the_replica_that_reports_the_prefix():
    a, b = Backend("http://a"), Backend("http://b")
    p = KvEvents(BS, LoadGuard(), {a.url: "tcp://x:1", b.url: "tcp://y:1"}, clock=lambda: 0.0)
    key = await p.key(RouteRequest(tokens=TOKENS))
    p.reported[b.url].apply(0, batch(stored([7, 8, 9], None, TOKENS[:3 * BS])))
    c = p.choose([a, b], key)
    assert c.backend is b and c.affinity


async def test_listen_decodes_vllms_zmq_batches():
    port = free_port()
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(f"tcp://127.0.0.1:{port}")
    p = KvEvents(BS, LoadGuard(), {"http://a": f"tcp://127.0.0.1:{port}"})
    task = asyncio.create_task(p.listen("http://a"))
    payload = msgspec.msgpack.encode(batch(stored([11, 12], None, TOKENS[:2 * BS])))
    seq = 0

    async def decoded() -> bool:  # a subscriber misses what is sent before it joins: resent
        nonlocal seq
        if p.reported["http://a"].matched(chain(TOKENS, BS)) >= 2:
            return True
        p.reported["http://a"].last_seq = None
        await pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        seq += 1
        return False

    try:
        await wait_for_async(decoded, "the listener applies a batch", 30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        pub.close(linger=0)
        ctx.term()
