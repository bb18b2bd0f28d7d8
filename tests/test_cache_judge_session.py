"""Integer weights every x86 CPU multiplies exactly (proxy/cache/judge_session.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from proxy.cache.judge_session import (
    Weights,
    _probe_weights,
    open_session,
    portable_bytes,
    served_weights,
    signed_is_exact,
)


def matmul_integer(path: Path, weights: np.ndarray, zero_point: np.ndarray | None) -> None:
    """A one-op model: int32 = MatMulInteger(u8 input, s8 weights[, s8 zero point])."""
    k, n = weights.shape
    inits = [numpy_helper.from_array(weights, "w")]
    inputs = ["a", "w"]
    if zero_point is not None:
        inits.append(numpy_helper.from_array(zero_point, "w_zp"))
        inputs += ["", "w_zp"]
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", inputs, ["y"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [None, n])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def saturating(tmp_path: Path, per_channel: bool | None) -> tuple[Path, np.ndarray, np.ndarray]:
    """A one-op model, an input and its exact product: 255 * 127 + 255 * 127 overflows the
    16-bit pair sums of AVX2's u8 x s8 kernel."""
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, size=(64, 8)).astype(np.int8)
    w[:, 0] = 127
    w[:, 1] = -128
    zp = None if per_channel is None else (
        rng.integers(-3, 4, size=8).astype(np.int8) if per_channel else np.int8(2))
    matmul_integer(tmp_path / "m.onnx", w, None if zp is None else np.asarray(zp))
    a = rng.integers(0, 256, size=(5, 64)).astype(np.uint8)
    a[0] = 255
    exact = a.astype(np.int64) @ (w.astype(np.int64) - (0 if zp is None else zp))
    return tmp_path / "m.onnx", a, exact


@pytest.mark.parametrize("weights", ["auto", "unsigned"])
@pytest.mark.parametrize("per_channel", [True, False, None])
def test_weights_that_saturate_avx2_s8_sums_multiply_exactly(tmp_path: Path,
                                                             per_channel: bool | None,
                                                             weights: Weights) -> None:
    path, a, exact = saturating(tmp_path, per_channel)
    out = open_session(path, threads=1, weights=weights).run(None, {"a": a})[0]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, exact)


@pytest.mark.parametrize("per_channel", [True, False, None])
def test_the_probe_says_whether_the_stored_weights_multiply_exactly_here(
        tmp_path: Path, per_channel: bool | None) -> None:
    # on an AVX2 or AVX-512BW CPU without VNNI: not exact, and the judge rewrites its weights
    path, a, exact = saturating(tmp_path, per_channel)
    out = open_session(path, threads=1, weights="stored").run(None, {"a": a})[0]
    assert np.array_equal(out, exact) == signed_is_exact()
    assert served_weights() == ("stored" if signed_is_exact() else "unsigned")


def test_the_probe_overflows_a_16_bit_pair_sum() -> None:
    # what vpmaddubsw computes (u8 x s8, adjacent pairs summed, saturated to int16) differs
    # from the exact product on the probe's first row of 255s
    for k, n in ((64, 8), (768, 32)):
        w, _ = _probe_weights(k, n)
        a = np.full(k, 255, dtype=np.int64)
        pairs = (a * w.T.astype(np.int64)).reshape(n, k // 2, 2).sum(axis=2)
        saturated = np.clip(pairs, -32768, 32767).sum(axis=1)
        assert (saturated != a @ w.astype(np.int64)).any()


def test_the_rewrite_is_unsigned_and_leaves_unsigned_models_alone(tmp_path: Path) -> None:
    matmul_integer(tmp_path / "m.onnx", np.full((4, 2), -7, np.int8), np.zeros(2, np.int8))
    data = portable_bytes(tmp_path / "m.onnx")
    assert data is not None
    model = onnx.load_from_string(data)
    kinds = {t.name: t.data_type for t in model.graph.initializer}
    assert kinds == {"w": TensorProto.UINT8, "w_zp": TensorProto.UINT8}
    assert numpy_helper.to_array(model.graph.initializer[0]).tolist() == [[121, 121]] * 4
    onnx.save(model, str(tmp_path / "u.onnx"))
    assert portable_bytes(tmp_path / "u.onnx") is None  # nothing left to rewrite


def test_a_weight_another_op_reads_as_signed_is_left_signed(tmp_path: Path) -> None:
    w = np.full((4, 2), 3, np.int8)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w"], ["y"]),
         helper.make_node("DequantizeLinear", ["w", "s"], ["wf"])], "g",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, 4])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [None, 2]),
         helper.make_tensor_value_info("wf", TensorProto.FLOAT, [4, 2])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.5), "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "m.onnx"))
    assert portable_bytes(tmp_path / "m.onnx") is None
