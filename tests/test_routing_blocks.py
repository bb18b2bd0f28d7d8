import pytest

from proxy.routing.blocks import INLINE_TOKENS, chain, chain_async


def test_equal_prefixes_hash_equal_and_partial_blocks_are_left_out():
    a = chain(list(range(40)), 16)
    b = chain([*range(32), 99, 98], 16)
    assert len(a) == 2 and a == b


def test_a_block_hash_covers_every_block_before_it():
    x = chain([1] * 16 + [2] * 16, 16)
    y = chain([3] * 16 + [2] * 16, 16)
    assert x[1] != y[1]  # same tokens in block 2, different parents
    assert chain([2] * 16, 16, parent=x[0]) == [x[1]]


def test_block_size_matters_and_short_prompts_have_no_blocks():
    tokens = list(range(256))
    assert len(chain(tokens, 16)) == 16 and len(chain(tokens, 128)) == 2
    assert chain(list(range(15)), 16) == []


@pytest.mark.parametrize("n", [100, INLINE_TOKENS + 100])
async def test_async_hashing_gives_the_same_chain(n):
    tokens = [i % 5000 for i in range(n)]
    assert await chain_async(tokens, 16) == chain(tokens, 16)
