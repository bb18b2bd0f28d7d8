"""deploy pad-model: the wide model computes the narrow one's function."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from deploy.pad_model import PadError, pad_model, pad_state


def small_llama(path: Path, tied: bool, seed: int = 0) -> None:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=256,
                                      tie_word_embeddings=tied, initializer_range=0.2)
    model = transformers.LlamaForCausalLM(config).float()
    model.save_pretrained(path, safe_serialization=True)


def load(path: Path) -> object:
    return transformers.AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()


@pytest.mark.parametrize(("tied", "width"), [(True, 4), (False, 4), (True, 2), (True, 8)])
def test_the_wide_model_computes_the_same_tokens(tmp_path: Path, tied: bool, width: int) -> None:
    small_llama(tmp_path / "src", tied)
    sizes = pad_model(tmp_path / "src", tmp_path / "wide", width)
    narrow, wide = load(tmp_path / "src"), load(tmp_path / "wide")
    assert wide.config.hidden_size == 64 * width  # type: ignore[attr-defined]
    embeddings = 300 * 64 * (1 if tied else 2)
    assert sizes["params"] > 0.8 * width * width * (sizes["params_src"] - embeddings)
    ids = torch.randint(0, 300, (3, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = narrow(ids).logits, wide(ids).logits  # type: ignore[operator]
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
        ga = narrow.generate(ids[:, :8], max_new_tokens=24, do_sample=False)  # type: ignore[attr-defined]
        gb = wide.generate(ids[:, :8], max_new_tokens=24, do_sample=False)  # type: ignore[attr-defined]
    assert torch.equal(ga, gb)
    added = wide.model.layers[0].mlp.up_proj.weight[-1]  # type: ignore[attr-defined]
    assert added.abs().sum() > 0  # the added neurons read real values: real cost


def test_an_unknown_parameter_is_refused() -> None:
    state = {"model.layers.0.self_attn.q_proj.bias": torch.zeros(8)}
    with pytest.raises(PadError, match="no rule"):
        pad_state(state, {"h": 8, "q": 8, "kv": 8, "i": 16, "v": 10}, 4)


def test_the_command_refuses_a_bad_width(tmp_path: Path) -> None:
    from deploy.cli import main

    small_llama(tmp_path / "src", True)
    assert main(["pad-model", str(tmp_path / "src"), str(tmp_path / "dst"), "--width", "0"]) == 2


def test_vllm_cpu_serves_the_wide_model_with_the_same_greedy_text(
        tmp_path: Path, vllm: object) -> None:
    import httpx

    from tests.support.procs import start_vllm

    narrow = vllm
    pad_model(narrow.model_dir, tmp_path / "wide", 4)  # type: ignore[attr-defined]
    wide = start_vllm(model_dir=tmp_path / "wide", extra=["max-model-len=512"])
    try:
        for prompt in ("the of and to in was for", "he that it with his they", "1 2 3 4"):
            texts = []
            for server in (narrow, wide):
                r = httpx.post(f"{server.url}/v1/completions", timeout=60,  # type: ignore[attr-defined]
                               json={"model": "tiny", "prompt": prompt, "max_tokens": 16,
                                     "temperature": 0})
                r.raise_for_status()
                texts.append(r.json()["choices"][0]["text"])
            assert texts[0] == texts[1] and texts[0]
    finally:
        wide.kill()
