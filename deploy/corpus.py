"""Text for training a small code LM without a network: Python's own sources and docs and the
installed packages' sources. Files are split by a hash of their path (never by position), so the
held-out files — used for the held-out loss and for the benchmark workloads — never train."""

from __future__ import annotations

import hashlib
import random
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from deploy.tiny_model import CHAT_TEMPLATE, SPECIAL_TOKENS

SUFFIXES = (".py", ".rst", ".txt", ".md")
HELD_OUT_BUCKETS = 20  # 1 in 20 files is held out


def default_roots() -> list[Path]:
    paths = sysconfig.get_paths()
    roots = [Path(paths["stdlib"]), Path(paths["purelib"])]
    docs = Path(paths["data"]) / "share" / "doc"
    return [r for r in dict.fromkeys([*roots, docs]) if r.is_dir()]


def is_held_out(rel: str) -> bool:
    return int(hashlib.sha1(rel.encode()).hexdigest(), 16) % HELD_OUT_BUCKETS == 0


@dataclass(frozen=True)
class Split:
    train: list[Path]
    held_out: list[Path]


def find_files(roots: Iterable[Path], max_bytes: int, seed: int) -> Split:
    """Files under roots (sorted, then a seeded shuffle), capped at about max_bytes in all."""
    found: list[tuple[str, Path]] = []
    for root in roots:
        for path in root.rglob("*"):
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts:
                size = path.stat().st_size
                if 200 <= size <= 400_000:
                    found.append((f"{root.name}/{path.relative_to(root)}", path))
    found.sort()
    random.Random(seed).shuffle(found)
    train: list[Path] = []
    held: list[Path] = []
    total = 0
    for rel, path in found:
        if total >= max_bytes:
            break
        total += path.stat().st_size
        (held if is_held_out(rel) else train).append(path)
    return Split(train=train, held_out=held)


def read_texts(paths: Iterable[Path]) -> Iterable[str]:
    for path in paths:
        try:
            yield path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue


def train_tokenizer(texts: Iterable[str], vocab_size: int) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
        pad_token="<|endoftext|>", unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def encode(tokenizer: object, texts: Iterable[str], batch: int = 512) -> list[int]:
    """All texts as one stream of token ids, documents separated by <|endoftext|>."""
    backend = tokenizer.backend_tokenizer  # type: ignore[attr-defined]
    sep = int(tokenizer.convert_tokens_to_ids("<|endoftext|>"))  # type: ignore[attr-defined]
    out: list[int] = []
    chunk: list[str] = []

    def flush() -> None:
        for enc in backend.encode_batch(chunk):
            out.extend(enc.ids)
            out.append(sep)
        chunk.clear()

    for text in texts:
        chunk.append(text)
        if len(chunk) >= batch:
            flush()
    if chunk:
        flush()
    return out
