"""`python -m deploy pad-model SRC DST --width 4`: SRC's function at a wider model's cost.

Speculative decoding pays where a decode step is bound by reading the weights; a model this
project can train in minutes (60M parameters) is bound by kernel launches instead, so drafting
cannot show its gain on it (docs/gpu-benchmarks.md, issue 14). This writes a Llama that
computes exactly SRC's next-token function with `width` times the hidden size, attention heads
(same head size) and MLP width, so about width² times the parameters:

- the added hidden dimensions start at zero (zero embedding columns) and stay zero: every
  projection that writes the residual stream (`o_proj`, `down_proj`) has zero rows there;
- the added heads and MLP neurons read real values (random weights) but write nothing: their
  columns of `o_proj` / `down_proj` are zero;
- RMSNorm averages over all dimensions, so its weights are scaled by 1/sqrt(width) and its eps
  by 1/width, which makes the wide norm equal the narrow one (exactly in binary floating point
  when width is a power of 4: 1/sqrt(4) = 0.5).

A GPU reads and multiplies every added weight (dense kernels do not skip zeros), so decode
costs what the wide model costs while the tokens, and a drafter's acceptance, are SRC's. It is
a cost model, not a better model: report it as such.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

# parameter name (after "model.layers.N.") -> how it grows: (rows, cols) each "h" (hidden),
# "q" (query heads x head size), "kv", "i" (MLP width) or "v" (vocabulary); then how the new
# part is filled: "rand" (reads: any finite values), "zero" (writes: must add nothing)
LAYER = {
    "self_attn.q_proj.weight": ("q", "h", "rand"),
    "self_attn.k_proj.weight": ("kv", "h", "rand"),
    "self_attn.v_proj.weight": ("kv", "h", "rand"),
    "self_attn.o_proj.weight": ("h", "q", "zero"),
    "mlp.gate_proj.weight": ("i", "h", "rand"),
    "mlp.up_proj.weight": ("i", "h", "rand"),
    "mlp.down_proj.weight": ("h", "i", "zero"),
}
TOP = {"model.embed_tokens.weight": ("v", "h", "zero"), "lm_head.weight": ("v", "h", "zero")}
NORM = re.compile(r"(model\.layers\.\d+\.(input_layernorm|post_attention_layernorm)|model\.norm)"
                  r"\.weight")


class PadError(ValueError):
    pass


def _rule(name: str) -> tuple[str, str, str] | None:
    if name in TOP:
        return TOP[name]
    m = re.fullmatch(r"model\.layers\.\d+\.(.+)", name)
    if m and m.group(1) in LAYER:
        return LAYER[m.group(1)]
    return None


def pad_state(state: dict[str, Any], sizes: dict[str, int], width: int,
              seed: int = 0) -> dict[str, Any]:
    """The wide state dict; `sizes` maps "h", "q", "kv", "i", "v" to SRC's sizes."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for name, t in state.items():
        if NORM.fullmatch(name):
            wide = torch.ones(t.shape[0] * width, dtype=torch.float32)
            wide[:t.shape[0]] = t.float() / math.sqrt(width)
            out[name] = wide.to(t.dtype)
            continue
        rule = _rule(name)
        if rule is None:
            raise PadError(f"pad-model: no rule for parameter {name!r} (a Llama without "
                           "biases is expected)")
        rows, cols, fill = rule
        if tuple(t.shape) != (sizes[rows], sizes[cols]):
            raise PadError(f"pad-model: {name} has shape {tuple(t.shape)}, expected "
                           f"{(sizes[rows], sizes[cols])}")
        shape = (t.shape[0] * (1 if rows == "v" else width), t.shape[1] * width)
        if fill == "zero":
            wide = torch.zeros(shape, dtype=torch.float32)
        else:
            wide = torch.randn(shape, generator=gen, dtype=torch.float32) * 0.02
        wide[:t.shape[0], :t.shape[1]] = t.float()
        out[name] = wide.to(t.dtype)
    return out


def pad_model(src: Path, dst: Path, width: int, seed: int = 0) -> dict[str, float]:
    """Write the wide model (config, weights, tokenizer files) to `dst`; returns its sizes."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    if width < 1:
        raise PadError("pad-model: --width must be at least 1")
    config = AutoConfig.from_pretrained(src)
    if config.model_type != "llama":
        raise PadError(f"pad-model: a Llama is expected, {src} is {config.model_type!r}")
    model = AutoModelForCausalLM.from_pretrained(src, torch_dtype="auto")
    n_q, n_kv = config.num_attention_heads, config.num_key_value_heads
    head = getattr(config, "head_dim", None) or config.hidden_size // n_q
    sizes = {"h": config.hidden_size, "q": n_q * head, "kv": n_kv * head,
             "i": config.intermediate_size, "v": config.vocab_size}
    state = pad_state({k: v for k, v in model.state_dict().items()
                       if not (config.tie_word_embeddings and k == "lm_head.weight")},
                      sizes, width, seed)
    config.hidden_size *= width
    config.intermediate_size *= width
    config.num_attention_heads = n_q * width
    config.num_key_value_heads = n_kv * width
    config.head_dim = head
    config.rms_norm_eps = config.rms_norm_eps / width
    wide = AutoModelForCausalLM.from_config(config, torch_dtype=model.dtype)  # type: ignore[no-untyped-call]
    missing, unexpected = wide.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise PadError(f"pad-model: state does not fit: {missing[:3]} {unexpected[:3]}")
    dst.mkdir(parents=True, exist_ok=True)
    wide.save_pretrained(dst, safe_serialization=True)
    for f in src.iterdir():  # tokenizer, chat template, held-out lists: everything but weights
        if f.is_file() and not f.name.startswith(("model", "config.json")) \
                and not (dst / f.name).exists():
            shutil.copy2(f, dst / f.name)
    params = sum(p.numel() for p in wide.parameters())
    return {"width": width, "params": params,
            "params_src": sum(p.numel() for p in model.parameters()),
            "bytes": params * torch.finfo(model.dtype).bits // 8}
