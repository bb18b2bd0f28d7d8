"""OpenAI request shapes (validated just enough to never 500) and OpenAI-shaped error bodies."""

from __future__ import annotations

from typing import Any

import orjson

from proxy import effective
from proxy.errors import BadRequest, ProxyError, UpstreamHTTPError
from proxy.types import Kind

JSON = "application/json"


def error_content(err: ProxyError) -> bytes:
    if isinstance(err, UpstreamHTTPError):
        return err.content if _is_openai_error(err.content) else orjson.dumps(
            {"error": {"message": err.content.decode("utf-8", "replace")[:2000],
                       "type": "upstream_error", "param": None, "code": err.status}})
    return orjson.dumps(err.body())


def _is_openai_error(content: bytes) -> bool:
    try:
        data = orjson.loads(content)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and isinstance(data.get("error"), dict)


def parse_json(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise BadRequest("the request body is empty; expected a JSON object")
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(f"the request body is not valid JSON (UTF-8): {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    return data


def _positive_int(body: dict[str, Any], name: str) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"'{name}' must be an integer", param=name)
    if value < 1:
        raise BadRequest(f"'{name}' must be at least 1, got {value}", param=name)


def _check_messages(messages: Any) -> None:
    if messages is None:
        raise BadRequest("'messages' is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", param="messages")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"messages[{i}] must be an object with a string 'role'",
                             param="messages")
        content = msg.get("content")
        if content is not None and not isinstance(content, str | list):
            raise BadRequest(f"messages[{i}].content must be a string or an array",
                             param="messages")
        if isinstance(content, list) and not all(isinstance(p, dict) for p in content):
            raise BadRequest(f"messages[{i}].content parts must be objects", param="messages")


def _check_prompt(prompt: Any) -> None:
    if prompt is None:
        raise BadRequest("'prompt' is required", param="prompt")
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return
        if all(isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool)
                                                 for t in p) for p in prompt):
            return
    raise BadRequest("'prompt' must be a string, an array of strings or of token ids",
                     param="prompt")


def validate(kind: Kind, body: dict[str, Any]) -> None:
    if kind == "chat":
        _check_messages(body.get("messages"))
    else:
        _check_prompt(body.get("prompt"))
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", param="model")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean", param="stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object", param="stream_options")
    if not effective.echo_only(kind, body):
        _positive_int(body, "max_tokens")
    if kind == "chat":
        _positive_int(body, "max_completion_tokens")  # completions ignore the field
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise BadRequest("'n' must be a positive integer", param="n")


def wants_usage(body: dict[str, Any]) -> bool:
    """stream_options.include_usage (params.check has coerced it as vLLM does)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True
