"""Train a small Llama-architecture code LM (and a smaller draft of the same tokenizer) on the
text every machine has (deploy/corpus.py), and save both in the HF format vLLM loads.

Seeded; a fixed number of steps (with a wall-clock cap that stops early and says so); the
held-out loss is measured on files that never train; a checkpoint every `ckpt_every` steps
lets a stopped run resume where it was.

`copy_frac` of the training rows teach the code-editing task the study measures: a chunk of a
training file, the task's instruction line (COPY_MARKER), then the same chunk again, as an
instruction-tuned model is taught its task format. Held-out loss is measured on plain text only;
the report adds the held-out copy accuracy (greedy next token, teacher-forced, on the second
copy of held-out chunks)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from deploy import corpus


@dataclass(frozen=True)
class ModelShape:
    hidden: int
    layers: int
    heads: int
    intermediate: int


@dataclass(frozen=True)
class TrainSpec:
    shape: ModelShape
    steps: int
    batch: int = 32
    seq_len: int = 1024
    lr: float = 1e-3
    warmup: int = 100
    seed: int = 0
    max_minutes: float = 8.0
    eval_batches: int = 8
    ckpt_every: int = 200
    copy_frac: float = 0.0


COPY_MARKER = "\n\n# ---- the same code, unchanged ----\n"  # bench.study_workloads' code_edit


SHAPES = {
    "main": ModelShape(hidden=640, layers=10, heads=10, intermediate=1728),   # ~60M params
    "draft": ModelShape(hidden=256, layers=4, heads=4, intermediate=768),    # ~7M params
    "tiny": ModelShape(hidden=64, layers=2, heads=2, intermediate=128),      # CPU tests
}


def _config(shape: ModelShape, tokenizer: Any, seq_len: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.heads, max_position_embeddings=max(4 * seq_len, 8192),
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        dtype="bfloat16")


def _lr(spec: TrainSpec, step: int) -> float:
    if step < spec.warmup:
        return spec.lr * (step + 1) / spec.warmup
    frac = (step - spec.warmup) / max(1, spec.steps - spec.warmup)
    return spec.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def _windows(data: Any, gen: Any, batch: int, seq_len: int) -> Any:
    import torch

    starts = torch.randint(0, data.numel() - seq_len - 1, (batch,), generator=gen)
    return torch.stack([data[s:s + seq_len + 1] for s in starts.tolist()])


def _copy_rows(data: Any, gen: Any, batch: int, seq_len: int, marker: Any) -> Any:
    """Rows of X + marker + X, the second copy cut to the row's length; and the position where
    the second copy starts."""
    import torch

    room = seq_len + 1 - marker.numel()
    first = (room + 1) // 2
    starts = torch.randint(0, data.numel() - first - 1, (batch,), generator=gen)
    rows = [torch.cat([data[s:s + first], marker, data[s:s + room - first]])
            for s in starts.tolist()]
    return torch.stack(rows), first + marker.numel()


def _batch(spec: TrainSpec, data: Any, gen: Any, marker: Any) -> Any:
    import torch

    n_copy = round(spec.batch * spec.copy_frac)
    plain = _windows(data, gen, spec.batch - n_copy, spec.seq_len)
    if n_copy == 0:
        return plain
    copies, _ = _copy_rows(data, gen, n_copy, spec.seq_len, marker)
    return torch.cat([plain, copies])


def _loss(model: Any, rows: Any) -> Any:
    import torch.nn.functional as F

    logits = model(input_ids=rows[:, :-1]).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), rows[:, 1:].reshape(-1))


def held_out_loss(model: Any, data: Any, spec: TrainSpec, device: str) -> float:
    import torch

    gen = torch.Generator().manual_seed(spec.seed + 1)  # the same windows every time
    model.eval()
    total = 0.0
    with torch.no_grad(), torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
        for _ in range(spec.eval_batches):
            total += float(_loss(model, _windows(data, gen, spec.batch, spec.seq_len).to(device)))
    model.train()
    return total / spec.eval_batches


def held_out_copy_accuracy(model: Any, data: Any, spec: TrainSpec, device: str,
                           marker: Any) -> float:
    """Share of the second copy's tokens the model predicts (argmax, teacher-forced)."""
    import torch

    gen = torch.Generator().manual_seed(spec.seed + 2)
    model.eval()
    hits = total = 0
    with torch.no_grad(), torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
        for _ in range(spec.eval_batches):
            rows, second = _copy_rows(data, gen, spec.batch, spec.seq_len, marker)
            rows = rows.to(device)
            pred = model(input_ids=rows[:, :-1]).logits.argmax(-1)
            # position t predicts token t + 1: the second copy's tokens from `second` on
            hits += int((pred[:, second - 1:] == rows[:, second:]).sum())
            total += pred[:, second - 1:].numel()
    model.train()
    return hits / max(1, total)


def train(spec: TrainSpec, tokenizer: Any, train_ids: Any, eval_ids: Any, out: Path,
          device: str, log: Any = print) -> dict[str, Any]:
    import torch
    from transformers import LlamaForCausalLM

    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(spec.seed)
    config = _config(spec.shape, tokenizer, spec.seq_len)
    model = LlamaForCausalLM(config).to(device)  # type: ignore[no-untyped-call,arg-type]
    model.config.use_cache = False
    opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device.startswith("cuda"))
    gen = torch.Generator().manual_seed(spec.seed)
    step = 0
    ckpt = work / "ckpt.pt"
    if ckpt.exists():
        state = torch.load(ckpt, map_location=device, weights_only=False)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        gen.set_state(state["gen"])
        step = int(state["step"])
        log(f"resumed at step {step}")
    resumed_from = step
    params = sum(p.numel() for p in model.parameters())
    log(f"{params / 1e6:.1f}M params, {train_ids.numel() / 1e6:.1f}M train tokens")
    marker = torch.tensor(tokenizer.backend_tokenizer.encode(
        COPY_MARKER, add_special_tokens=False).ids)
    started = time.monotonic()
    stopped_early = False
    loss = float("nan")
    while step < spec.steps:
        if time.monotonic() - started > spec.max_minutes * 60:
            stopped_early = True
            break
        for group in opt.param_groups:
            group["lr"] = _lr(spec, step)
        rows = _batch(spec, train_ids, gen, marker).to(device)
        with torch.autocast(device.split(":")[0], dtype=torch.bfloat16):
            out_loss = _loss(model, rows)
        opt.zero_grad(set_to_none=True)
        out_loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0 or step == spec.steps:
            loss = float(out_loss.detach())
            log(f"step {step} loss {loss:.3f} {time.monotonic() - started:.0f}s")
        if step % spec.ckpt_every == 0:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(),
                        "gen": gen.get_state(), "step": step}, ckpt)
    report = {"params": params, "steps": step, "resumed_from": resumed_from,
              "stopped_early": stopped_early,
              "train_loss": loss, "held_out_loss": held_out_loss(model, eval_ids, spec, device),
              "held_out_copy_accuracy": held_out_copy_accuracy(model, eval_ids, spec, device,
                                                               marker),
              "train_tokens": int(train_ids.numel()), "held_out_tokens": int(eval_ids.numel()),
              "seconds": round(time.monotonic() - started, 1), "spec": asdict(spec)}
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    gen_cfg = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    (out / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    (out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    log(f"held-out loss {report['held_out_loss']:.3f}, copy accuracy "
        f"{report['held_out_copy_accuracy']:.3f} after {step} steps -> {out}")
    return report


def train_models(out: Path, spec: TrainSpec, draft: TrainSpec | None, draft_out: Path | None,
                 corpus_mb: float, vocab: int, device: str,
                 roots: list[Path] | None = None) -> list[dict[str, Any]]:
    """Corpus, tokenizer and token streams are made once and shared by both models."""
    import torch

    split = corpus.find_files(roots or corpus.default_roots(), int(corpus_mb * 2**20), spec.seed)
    out.mkdir(parents=True, exist_ok=True)
    (out / "held_out_files.txt").write_text("".join(f"{p}\n" for p in split.held_out))
    tokenizer = corpus.train_tokenizer(corpus.read_texts(split.train[:3000]), vocab)
    train_ids = torch.tensor(corpus.encode(tokenizer, corpus.read_texts(split.train)))
    eval_ids = torch.tensor(corpus.encode(tokenizer, corpus.read_texts(split.held_out)))
    print(f"{len(split.train)} train files, {len(split.held_out)} held-out files")
    reports = [train(spec, tokenizer, train_ids, eval_ids, out, device)]
    if draft is not None and draft_out is not None:
        reports.append(train(draft, tokenizer, train_ids, eval_ids, draft_out, device))
    return reports


def spec_for(preset: str, steps: int, **overrides: Any) -> TrainSpec:
    return replace(TrainSpec(shape=SHAPES[preset], steps=steps), **overrides)
