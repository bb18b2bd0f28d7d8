"""The judge's ONNX Runtime session, with integer weights every x86 CPU multiplies exactly.

`quantize_dynamic` wrote the judges' weights as signed int8 (`MatMulInteger(u8 activations,
s8 weights)`). ONNX Runtime runs that product with VNNI on AVX-512 CPUs (exact, 32-bit sums)
but with `vpmaddubsw` on AVX2-only CPUs, whose 16-bit pair sums saturate: there the mpnet judge
scored noise (logit correlation -0.03 with the exact path over 199 dev pairs on an AVX2 EPYC;
docs/cache.md "Portability"). ORT documents the trade and offers unsigned weights, whose
u8 x u8 kernel widens to 16 bits before multiplying and so never saturates.

`s8 -> u8` is exact: q + 128 with zero point zp + 128 keeps every (q - zp), so the product,
and hence every logit, is the one the calibration table was measured with. The rewrite runs at
every load (tools.judge.train still exports signed weights); a model with no signed weights
loads from its path unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def open_session(path: Path, threads: int, portable: bool = True,
                 level: str = "ORT_ENABLE_ALL") -> Any:
    """Blocking. `portable=False` runs the weights as stored, `level` another graph
    optimisation (both for tools.judge.portable; the judge is calibrated with these defaults)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    model = portable_bytes(path) if portable else None
    return ort.InferenceSession(model if model is not None else str(path), options,
                                providers=["CPUExecutionProvider"])
