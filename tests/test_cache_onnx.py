"""The embedder's ONNX Runtime path gives torch's vectors, batched and padded, and declines
model pipelines it would not reproduce."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from proxy.cache.embedder import Embedder
from proxy.cache.onnx import OnnxEncoder, _pooling
from tests.cache_support import _model, embedder

TEXTS = ["How do I reverse a list in Python?", "hi",
         "Convert JSON to YAML in Go, quickly and safely, with comments kept where possible",
         "What's the capital of France?"]


@pytest.fixture(scope="module")
def onnx() -> Embedder:
    fast = OnnxEncoder.build(_model(), 1)
    assert fast is not None
    return Embedder(_model(), "sentence-transformers/all-MiniLM-L6-v2", onnx=fast)


def test_onnx_vectors_are_torch_vectors_in_a_padded_batch(onnx: Embedder) -> None:
    reference = embedder()  # torch path
    assert onnx.backend == "onnx" and reference.backend == "torch"
    long = "word " * (onnx.window + 5)
    got = onnx.encode([TEXTS[0], long, *TEXTS[1:]])
    want = reference.encode(TEXTS)
    assert got[1] is None  # over the window, and the others are unaffected by its length
    for a, b in zip([got[0], *got[2:]], want, strict=True):
        assert a is not None and b is not None and a.dtype == np.float32
        assert np.allclose(a, b, atol=1e-5)
        assert abs(float(np.linalg.norm(a)) - 1.0) < 1e-5
    alone = onnx.encode([TEXTS[1]])[0]  # no padding: the same vector as in the batch
    assert alone is not None and got[2] is not None and np.allclose(alone, got[2], atol=1e-5)


class Transformer:
    pass


class Pooling:
    def __init__(self, mode: str | None, **flags: bool) -> None:
        self.mode = mode
        for k, v in flags.items():
            setattr(self, f"pooling_mode_{k}", v)

    def get_config_dict(self) -> dict[str, Any]:
        return {} if self.mode is None else {"pooling_mode": self.mode}


class Normalize:
    pass


class Dense:
    pass


def test_only_pipelines_the_onnx_path_reproduces() -> None:
    assert _pooling([Transformer(), Pooling("mean"), Normalize()]) == "mean"
    assert _pooling([Transformer(), Pooling("cls")]) == "cls"
    assert _pooling([Transformer(), Pooling(None, mean_tokens=True)]) == "mean"  # older ST
    assert _pooling([Transformer(), Pooling("max"), Normalize()]) is None
    assert _pooling([Transformer(), Pooling("mean"), Dense(), Normalize()]) is None
    assert _pooling([Transformer(), Pooling(None, mean_tokens=True, cls_token=True)]) is None


async def test_load_picks_the_backend_and_refuses_an_unknown_one() -> None:
    with pytest.raises(ValueError, match="PROXY_CACHE_EMBED_BACKEND"):
        await Embedder.load(backend="tensorrt")
    emb = await Embedder.load(backend="onnx")
    try:
        assert emb.backend == "onnx"
        vec = await emb.embed(TEXTS[0])
        assert vec is not None and vec.shape == (384,)
    finally:
        await emb.aclose()
