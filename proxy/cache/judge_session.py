"""The judge's ONNX Runtime session, with integer weights every x86 CPU multiplies exactly.

`quantize_dynamic` wrote the judges' weights as signed int8 (`MatMulInteger(u8 activations,
s8 weights)`). ONNX Runtime runs that product with VNNI on AVX-512 CPUs (exact, 32-bit sums)
but with `vpmaddubsw` on AVX2-only CPUs, whose 16-bit pair sums saturate: there the mpnet judge
scored noise (logit correlation -0.03 with the exact path over 199 dev pairs on an AVX2 EPYC;
docs/cache.md "Portability"). ORT documents the trade and offers unsigned weights, whose
u8 x u8 kernel widens to 16 bits before multiplying and so never saturates.

`s8 -> u8` is exact: q + 128 with zero point zp + 128 keeps every (q - zp), so the product,
and hence every logit, is the one the calibration table was measured with. A model with no
signed weights loads from its path unchanged.

The u8 x u8 kernel costs more than VNNI's u8 x s8 one: on an AVX-512 VNNI EPYC the mpnet judge
took 1.77x as long a pair with the rewrite (docs/cache.md "Only where needed"). So the rewrite
is done only where it is needed: at the first load a probe (`signed_is_exact`) multiplies,
through ONNX Runtime's u8 x s8 kernel, weights and inputs whose pair sums overflow 16 bits;
where the product is exact (VNNI, AVX-VNNI, AMX: 32-bit sums) the weights load as stored,
elsewhere they are rewritten. Both paths compute the same integers, so the logits are the same
(all of dev, bit for bit, on that EPYC); the judge's start-up self-check (judge.py) still
compares the reference pairs either way.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

import numpy as np


def _signed_weights(model: Any) -> int:
    """Rewrite, in place, every int8 weight of a MatMulInteger as uint8 + 128; how many."""
    import onnx
    from onnx import numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    users: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            users.setdefault(name, set()).add(node.op_type)
    changed = 0
    for node in model.graph.node:
        if node.op_type != "MatMulInteger" or len(node.input) < 2:
            continue
        weight = inits.get(node.input[1])
        if weight is None or weight.data_type != onnx.TensorProto.INT8:
            continue
        zp_name = node.input[3] if len(node.input) > 3 else ""
        zp = inits.get(zp_name) if zp_name else None
        if zp_name and zp is None:
            continue  # a zero point computed at run time: not a layout this rewrite knows
        if users[weight.name] != {"MatMulInteger"} or (zp is not None
                                                       and users[zp.name] != {"MatMulInteger"}):
            continue  # shared with another op that reads it as signed
        q = numpy_helper.to_array(weight).astype(np.int16) + 128
        weight.CopyFrom(numpy_helper.from_array(q.astype(np.uint8), weight.name))
        if zp is not None:
            z = numpy_helper.to_array(zp).astype(np.int16) + 128
            zp.CopyFrom(numpy_helper.from_array(z.astype(np.uint8), zp.name))
        else:
            name = f"{weight.name}_u8_zero_point"
            model.graph.initializer.append(
                numpy_helper.from_array(np.asarray(128, dtype=np.uint8), name))
            while len(node.input) < 3:
                node.input.append("")  # a_zero_point: absent
            node.input.append(name)
        changed += 1
    return changed


def portable_bytes(path: Path) -> bytes | None:
    """The model with unsigned integer weights, serialized; None when it has no signed ones."""
    import onnx

    model = onnx.load(str(path))  # reads external weight files beside it
    if not _signed_weights(model):
        return None
    return bytes(model.SerializeToString())


def _probe_model(k: int, n: int) -> bytes:
    """MatMulInteger(u8 a [M, k], s8 weights [k, n] with per-column zero points; a's zero point
    an input): the layout quantize_dynamic exports, with the weights as a constant (prepacked,
    as the judge's are)."""
    from onnx import TensorProto, helper, numpy_helper

    w, zp = _probe_weights(k, n)
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["a", "w", "a_zp", "w_zp"], ["y"])], "probe",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, k]),
         helper.make_tensor_value_info("a_zp", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [None, n])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(zp, "w_zp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return bytes(model.SerializeToString())


def _probe_weights(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    w[:, 0] = 127  # 255 * 127 + 255 * 127 overflows a 16-bit pair sum (AVX2, AVX-512BW)
    w[:, 1] = -128
    zp = np.zeros(n, dtype=np.int8)
    zp[2:] = rng.integers(-3, 4, size=n - 2)
    return w, zp


@functools.cache
def signed_is_exact() -> bool:
    """Blocking, once per process (~10 ms): does this CPU's ONNX Runtime multiply u8 x s8 with
    exact sums? ONNX Runtime picks its integer kernel per CPU, the same for every shape and
    op (MatMulInteger, and the fused DynamicQuantizeMatMul / MatMulIntegerToFloat the judge
    runs as), so a product that saturates anywhere saturates here."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    rng = np.random.default_rng(1)
    for m, k, n in ((1, 64, 8), (7, 768, 32), (40, 3072, 16)):
        w, zp = _probe_weights(k, n)
        a = rng.integers(0, 256, size=(m, k)).astype(np.uint8)
        a[0] = 255
        a_zp = np.uint8(rng.integers(0, 256))
        try:
            session = ort.InferenceSession(_probe_model(k, n), options,
                                           providers=["CPUExecutionProvider"])
            got = session.run(None, {"a": a, "a_zp": np.asarray(a_zp)})[0]
        except Exception:  # whatever fails here, the unsigned path is safe
            return False
        want = (a.astype(np.int64) - int(a_zp)) @ (w.astype(np.int64) - zp.astype(np.int64))
        if not np.array_equal(got, want):
            return False
    return True


Weights = Literal["auto", "unsigned", "stored"]


def served_weights(weights: Weights = "auto") -> Literal["unsigned", "stored"]:
    """"auto": the weights as stored where this CPU multiplies them exactly, else unsigned."""
    if weights == "auto":
        return "stored" if signed_is_exact() else "unsigned"
    return weights


def open_session(path: Path, threads: int, weights: Weights = "auto",
                 level: str = "ORT_ENABLE_ALL") -> Any:
    """Blocking. `weights`: "auto" (the served path: exact products on this CPU, the faster
    kernel where both are exact), "unsigned" (always rewritten), "stored" (as exported, exact
    or not); `level` another graph optimisation (both for tools.judge.portable; the judge is
    calibrated with these defaults)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    model = portable_bytes(path) if served_weights(weights) == "unsigned" else None
    return ort.InferenceSession(model if model is not None else str(path), options,
                                providers=["CPUExecutionProvider"])
