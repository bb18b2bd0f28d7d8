"""The fake vLLM's tokenizer routes and Responses API (tests/support/fake_upstream.py): answers
shaped like vLLM 0.32's, deterministic ("w0 w1 ..." up to max_output_tokens, default 16)."""

from __future__ import annotations

import json
from typing import Any

INPUT_TOKENS = 5


def words(data: dict[str, Any]) -> list[str]:
    n = data.get("max_output_tokens") or 16
    return [f" w{i}" for i in range(min(n, 16))]


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


def response(data: dict[str, Any], model: str, status: str = "completed",
             output: str | None = None) -> dict[str, Any]:
    said = words(data)
    text = "".join(said) if output is None else output
    return {"id": data.get("request_id", "resp_fake"), "created_at": 1, "object": "response",
            "model": model, "status": status, "max_output_tokens": data.get("max_output_tokens"),
            "previous_response_id": data.get("previous_response_id"),
            "temperature": data.get("temperature"), "top_p": data.get("top_p"),
            "output": [] if output == "" else [{
                "id": "msg_fake", "type": "message", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "usage": None if status == "in_progress" else {
                "input_tokens": INPUT_TOKENS, "output_tokens": len(said),
                "total_tokens": INPUT_TOKENS + len(said)}}


def events(data: dict[str, Any], model: str) -> list[bytes]:
    """A streamed response: created, one delta a word, completed (no [DONE])."""
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": response(data, model, "in_progress", "")}]
    out += [{"type": "response.output_text.delta", "item_id": "msg_fake", "output_index": 0,
             "content_index": 0, "delta": w} for w in words(data)]
    out.append({"type": "response.completed", "response": response(data, model)})
    return [f"event: {e['type']}\ndata: ".encode()
            + json.dumps({**e, "sequence_number": i}).encode() + b"\n\n"
            for i, e in enumerate(out)]


def not_found(response_id: str) -> dict[str, Any]:
    """vLLM's answer for a stored response it does not hold."""
    return {"error": {"message": f"Response with id '{response_id}' not found.",
                      "type": "invalid_request_error", "param": "response_id", "code": 404}}


def stored(method: str, path: str, query: str, held: dict[str, Any],
           model: str) -> tuple[int, Any]:
    """GET /v1/responses/{id} (`?stream=true`: its events) and POST .../cancel, as vLLM
    answers them for the responses `held` (id -> the request that made it): a synchronous
    response cannot be cancelled."""
    rid = path.removeprefix("/v1/responses/").removesuffix("/cancel")
    if rid not in held:
        return 404, not_found(rid)
    if path.endswith("/cancel"):
        return 400, {"error": {"message": "Cannot cancel a synchronous response.",
                               "type": "invalid_request_error", "param": "response_id",
                               "code": 400}}
    made = {**held[rid], "request_id": rid}
    if "stream=true" in query:
        return 200, events(made, model)
    return 200, response(made, model)
