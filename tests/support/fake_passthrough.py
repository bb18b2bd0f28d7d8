"""The fake vLLM's tokenizer routes (tests/support/fake_upstream.py): answers shaped like
vLLM 0.32's."""

from __future__ import annotations

from typing import Any


def type_error(param: str, kind: str, msg: str, value: Any) -> dict[str, Any]:
    """vLLM's answer for a body field of the wrong type."""
    return {"error": {"message": f"1 validation error:\n  {{'type': '{kind}', 'loc': "
                                 f"'body.{param}', 'msg': '{msg}', 'input': {value!r}}}",
                      "type": "Bad Request", "param": f"body.{param}", "code": 400}}


def tokenize(data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    prompt = data.get("prompt")
    if prompt is not None and not isinstance(prompt, str):
        return 400, type_error("prompt", "string_type", "Input should be a valid string", prompt)
    text = prompt or " ".join(str(m.get("content")) for m in data.get("messages", []))
    tokens = list(range(len(text.split())))
    return 200, {"count": len(tokens), "tokens": tokens, "max_model_len": 2048,
                 "token_strs": None}


def detokenize(data: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    tokens = data.get("tokens")
    if not isinstance(tokens, list):
        return 400, type_error("tokens", "list_type", "Input should be a valid list", tokens)
    return 200, {"prompt": "".join(f"t{t}" for t in tokens)}
