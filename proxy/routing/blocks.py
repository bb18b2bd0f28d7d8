"""Chained block hashes of a token sequence, as vLLM's prefix cache sees it: the prompt cut
into full blocks of `block_size` tokens (a partial last block is never cached), each block's
hash covering its tokens and its parent's hash, so equal hashes mean equal prefixes."""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import Sequence
from hashlib import blake2b

INLINE_TOKENS = 8192  # longer prompts (~1 ms of hashing) are hashed off the event loop


def chain(tokens: Sequence[int], block_size: int, parent: int = 0) -> list[int]:
    data = array("q", tokens).tobytes()  # 8 bytes a token: any vocabulary fits
    step = 8 * block_size
    out: list[int] = []
    prev = parent.to_bytes(8, "little", signed=False)
    for start in range(0, len(data) - step + 1, step):
        prev = blake2b(prev + data[start:start + step], digest_size=8).digest()
        out.append(int.from_bytes(prev, "little"))
    return out


async def chain_async(tokens: Sequence[int], block_size: int) -> list[int]:
    if len(tokens) <= INLINE_TOKENS:
        return chain(tokens, block_size)
    return await asyncio.to_thread(chain, tokens, block_size)
