"""Write a tiny random-weight Llama-shaped model that vLLM (CPU or GPU) can serve.

The tokenizer is a byte-level BPE trained with `tokenizers` on text generated here, so any
UTF-8 input encodes without unknown tokens. Weights are random (seeded): throughput and
latency are real, the text is noise.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_WORDS = (
    "the of and to in is you that it he was for on are as with his they at be this have from "
    "or one had by word but not what all were we when your can said there use an each which she "
    "do how their if will up other about out many then them these so some her would make like "
    "him into time has look two more write go see number no way could people my than first water "
    "been call who oil its now find long down day did get come made may part python list string "
    "reverse sort convert json yaml file read write function class error install server request "
    "cache token model proxy latency throughput memory kernel docker redis vector database query "
    "explain difference between what why where capital france paris germany berlin recipe bread "
    "weather tomorrow weekend history science music river mountain ocean city country planet"
).split()


@dataclass(frozen=True)
class TinyModelSpec:
    hidden_size: int = 256
    num_heads: int = 4
    num_layers: int = 2
    intermediate_size: int = 512
    vocab_size: int = 4096
    max_position_embeddings: int = 32768  # long enough to keep vLLM busy for tens of seconds
    seed: int = 0
    # Wide init so greedy answers differ by prompt (at 0.02 every answer is one token repeated).
    init_std: float = 0.4

    def __post_init__(self) -> None:
        head_dim = self.hidden_size // self.num_heads
        if head_dim * self.num_heads != self.hidden_size:
            raise ValueError("hidden_size must be a multiple of num_heads")
        if head_dim not in (32, 64, 80, 96, 112, 128, 256):
            raise ValueError(f"head_dim {head_dim} is not one vLLM's CPU attention supports")


def _corpus(seed: int, lines: int = 20000) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        n = rng.randint(4, 24)
        sentence = " ".join(rng.choice(_WORDS) for _ in range(n))
        out.append(sentence.capitalize() + rng.choice([".", "?", "!", ":", ","]))
    # Digits, punctuation and code-ish text so they get merges of their own.
    out += [f"x = {i} * {i + 1} + {i % 7}; print(x)" for i in range(2000)]
    out += ['{"key": "value", "n": 1, "ok": true}', "def f(a, b):\n    return a + b\n"] * 200
    return out


def _train_tokenizer(spec: TinyModelSpec) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec.seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_tiny_model(out_dir: Path, spec: TinyModelSpec = TinyModelSpec()) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(spec)
    vocab = len(tokenizer)  # type: ignore[arg-type]
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,  # type: ignore[attr-defined]
        eos_token_id=tokenizer.eos_token_id,  # type: ignore[attr-defined]
        pad_token_id=tokenizer.pad_token_id,  # type: ignore[attr-defined]
        dtype="bfloat16",
        initializer_range=spec.init_std,
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)  # type: ignore[no-untyped-call,arg-type]
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)  # type: ignore[attr-defined]
    gen = {"bos_token_id": config.bos_token_id, "eos_token_id": config.eos_token_id}
    (out_dir / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    return out_dir
