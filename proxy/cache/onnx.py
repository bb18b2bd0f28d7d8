"""The embedder's fast path: the model's transformer exported to ONNX once at start (in
memory, ~1 s) and run by ONNX Runtime on a fixed number of threads; pooling and normalizing in
numpy. Same vectors as torch (max difference ~1e-7 on MiniLM), ~2x faster per question on
this box's CPU (bench/cache_cost.py). Models whose pipeline is not transformer -> mean/CLS
pooling [-> normalize] stay on torch.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import numpy as np
import numpy.typing as npt


def _pooling(model: Any) -> str | None:
    names = [type(m).__name__ for m in model]
    if len(names) < 2 or names[0] != "Transformer" or names[1] != "Pooling" \
            or any(n != "Normalize" for n in names[2:]):
        return None
    pool = model[1]
    mode = pool.get_config_dict().get("pooling_mode")
    if mode is None:  # older sentence-transformers: one flag per mode
        flags = [m for m in ("cls_token", "mean_tokens", "max_tokens")
                 if getattr(pool, f"pooling_mode_{m}", False)]
        mode = {"mean_tokens": "mean", "cls_token": "cls"}.get(flags[0]) \
            if len(flags) == 1 else None
    return mode if mode in ("mean", "cls") else None


class OnnxEncoder:
    def __init__(self, session: Any, inputs: list[str], pooling: str) -> None:
        self._session = session
        self._inputs = inputs
        self._pooling = pooling

    @staticmethod
    def build(model: Any, threads: int) -> OnnxEncoder | None:
        """Blocking. None when the model's shape is not one this path reproduces exactly."""
        pooling = _pooling(model)
        if pooling is None:
            return None
        import onnxruntime as ort
        import torch

        transformer = model[0].auto_model.eval()
        sample = model.tokenizer(["an example question"], return_tensors="pt")
        inputs = list(sample.keys())

        class Hidden(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.inner = transformer

            def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
                out = self.inner(**dict(zip(inputs, tensors, strict=True)))
                return out.last_hidden_state  # type: ignore[no-any-return]

        buf = io.BytesIO()
        axes = {name: {0: "batch", 1: "tokens"} for name in [*inputs, "hidden"]}
        # eval() first: export restores the wrapper's mode afterwards, and a new module is in
        # training mode, which would leave the model's dropout on for the torch path
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes about the model's python branches
            torch.onnx.export(Hidden().eval(), tuple(sample[n] for n in inputs),
                              buf,  # type: ignore[arg-type]  # a file object is accepted
                              input_names=inputs, output_names=["hidden"],
                              dynamic_axes=axes, opset_version=17, dynamo=False)
        model.eval()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session = ort.InferenceSession(buf.getvalue(), options,
                                       providers=["CPUExecutionProvider"])
        return OnnxEncoder(session, inputs, pooling)

    def encode(self, features: dict[str, npt.NDArray[np.int64]]) -> npt.NDArray[np.float32]:
        """Blocking: tokenizer output (numpy, padded) -> normalized sentence vectors."""
        feed = {name: features[name].astype(np.int64, copy=False) for name in self._inputs}
        hidden = np.asarray(self._session.run(None, feed)[0], dtype=np.float32)
        if self._pooling == "cls":
            pooled = hidden[:, 0]
        else:
            mask = features["attention_mask"][..., None].astype(np.float32)
            pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        out: npt.NDArray[np.float32] = (pooled / norms).astype(np.float32, copy=False)
        return out
