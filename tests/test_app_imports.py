"""With the cache off, building and starting the app imports none of the cache's heavy
dependencies (a GPU host without faiss-cpu must still run the proxy); with the exact cache
alone, none of the semantic tier's; without PROXY_REDIS_URL, no redis; and no app in a test
process freezes the garbage collector."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

from proxy.app import create_app
from proxy.settings import Settings
from tests.support.procs import REPO

HEAVY = ("faiss", "torch", "sentence_transformers", "onnxruntime", "numpy")


def test_cache_off_imports_no_heavy_dependency() -> None:
    code = (
        "import sys\n"
        "from proxy.app import create_app\n"
        "from proxy.settings import Settings\n"
        "create_app(Settings(upstreams=('http://127.0.0.1:9',), cache='off'))\n"
        f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "", f"imported with the cache off: {out.stdout.strip()}"


@pytest.mark.parametrize("cache", ["off", "exact"])
def test_a_started_app_without_the_semantic_tier_imports_none_of_its_dependencies(
        cache: str) -> None:
    # the cache is built in the lifespan: an app that is only created builds none of it
    code = (
        "import asyncio, sys\n"
        "from proxy.app import create_app\n"
        "from proxy.settings import Settings\n"
        f"app = create_app(Settings(upstreams=('http://127.0.0.1:9',), cache={cache!r}))\n"
        "async def main():\n"
        "    async with app.router.lifespan_context(app):\n"
        "        pass\n"
        "asyncio.run(main())\n"
        f"print(','.join(m for m in {(*HEAVY, 'redis')!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, check=True, timeout=120)
    assert out.stdout.strip() == "", f"imported with cache={cache}: {out.stdout.strip()}"


async def test_app_in_a_test_does_not_freeze_the_gc() -> None:
    before = gc.get_freeze_count()
    app = create_app(Settings(upstreams=("http://127.0.0.1:9",), cache="off"))
    async with app.router.lifespan_context(app):
        assert gc.get_freeze_count() == before
