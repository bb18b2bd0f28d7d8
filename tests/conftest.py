from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.procs import Redis, Vllm, redis_server, vllm_server


@pytest.fixture(scope="session")
def vllm() -> Iterator[Vllm]:
    with vllm_server() as server:
        yield server


@pytest.fixture
def redis() -> Iterator[Redis]:
    with redis_server() as server:
        yield server
