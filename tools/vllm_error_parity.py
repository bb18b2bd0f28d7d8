"""Send bad request bodies to a running vLLM directly and through the proxy (in-process, cache
off) and print where the answers differ in status, error type, code or param.

    PYTHONPATH=. .venv/bin/python -m tools.vllm_error_parity http://127.0.0.1:8000 [-m] [-v]

-m also prints message differences where the shape agrees; -v prints every case. The vLLM must
serve a model named `tiny` (python -m deploy tiny-model DIR; tests/support/procs.py starts one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import httpx
import orjson

from proxy.settings import Settings
from tests.support.proxy_app import proxy_client

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
COMP = {"model": "tiny", "prompt": "hi", "max_tokens": 2}
C, P = "/v1/chat/completions", "/v1/completions"
Case = tuple[str, str, Any]  # name, path, a body (bytes as sent, else JSON)


def drop(d: dict[str, Any], k: str) -> dict[str, Any]:
    return {key: v for key, v in d.items() if key != k}


def cases() -> list[Case]:
    out: list[Case] = []

    def add(name: str, path: str, body: Any) -> None:
        out.append((name, path, body))

    for p, base in ((C, CHAT), (P, COMP)):
        k = "chat" if p == C else "comp"
        add(f"{k}:missing_model", p, drop(base, "model"))
        add(f"{k}:model_null", p, {**base, "model": None})
        add(f"{k}:model_int", p, {**base, "model": 5})
        add(f"{k}:model_unknown", p, {**base, "model": "nope"})
        fields: dict[str, list[Any]] = {"temperature": ["x", [1], {}, True, -1, 3, "inf", "nan"],
                        "top_p": ["x", 0, 2, None, [1]], "n": ["x", 0, 1.5, -1, True, [1]],
                        "stop": [5, [5], {"a": 1}, [None], ["a"] * 5, ""],
                        "max_tokens": ["x", 0, -1, 1.5, 10**30, 2**63, 2**31, [1], True, None, "5"],
                        "stream": ["x", 2, [True], {}, None, "true", 0],
                        "stream_options": ["x", 5, []], "seed": ["x", 1.5],
                        "logit_bias": ["x", [1]], "user": [[1]], "frequency_penalty": [None, "x"],
                        "max_completion_tokens": ["x", 0, -1, 10**30]}
        for f, vals in fields.items():
            for v in vals:
                add(f"{k}:{f}={v!r}"[:60], p, {**base, f: v})
        add(f"{k}:bad_json", p, b"{not json")
        add(f"{k}:empty_body", p, b"")
        add(f"{k}:array_body", p, b"[1,2]")
        add(f"{k}:string_body", p, b"\"hi\"")
        add(f"{k}:null_body", p, b"null")
        add(f"{k}:number_body", p, b"5")
        add(f"{k}:bad_utf8", p, b'{"model": "tiny", "prompt": "\xff"}')
        add(f"{k}:trailing", p, orjson.dumps(base) + b" x")

    for name, v in {"messages_empty": [], "messages_str": "hi", "messages_null": None,
                    "messages_obj": {"role": "user"}, "messages_int": 5,
                    "msg_role_int": [{"role": 5, "content": "hi"}],
                    "msg_role_missing": [{"content": "hi"}],
                    "msg_role_unknown": [{"role": "wizard", "content": "hi"}],
                    "msg_role_null": [{"role": None, "content": "hi"}],
                    "msg_content_int": [{"role": "user", "content": 5}],
                    "msg_content_obj": [{"role": "user", "content": {"a": 1}}],
                    "msg_content_null": [{"role": "user", "content": None}],
                    "msg_content_missing": [{"role": "user"}],
                    "msg_content_list_str": [{"role": "user", "content": ["hi"]}],
                    "msg_content_list_int": [{"role": "user", "content": [5]}],
                    "msg_content_part_notype": [{"role": "user", "content": [{"text": "hi"}]}],
                    "msg_content_part_badtype": [{"role": "user", "content": [{"type": "x", "text": "hi"}]}],  # noqa: E501
                    "msg_content_empty_list": [{"role": "user", "content": []}],
                    "msg_str": ["hi"], "msg_int": [5], "msg_null": [None], "msg_list": [[]],
                    "msg_assistant_only": [{"role": "assistant", "content": "hi"}],
                    "msg_system_only": [{"role": "system", "content": "hi"}],
                    "msg_tool_no_id": [{"role": "tool", "content": "hi"}],
                    }.items():
        add(f"chat:{name}", C, {**CHAT, "messages": v})
    add("chat:messages_missing", C, drop(CHAT, "messages"))
    for name, v in {"empty": [], "nested_empty": [[]], "int": 5, "null": None, "mixed": [1, "a"],
                    "true": [True], "true_false": [True, False], "nested_true": [[True]],
                    "float": [1.5], "neg": [-1], "huge": [10**30], "oov": [10**8], "dict": {"a": 1},
                    "list_dict": [{"a": 1}], "nested_mixed": [[1], "a"], "empty_str": "",
                    "list_empty_str": [""], "nested_str": [["a"]], "bool": True,
                    "float_scalar": 1.5,
                    "str_list_null": ["a", None], "nested_null": [[1, None]]}.items():
        add(f"comp:prompt_{name}", P, {**COMP, "prompt": v})
    add("comp:prompt_missing", P, drop(COMP, "prompt"))
    return out


def shape(r: httpx.Response) -> tuple[Any, ...]:
    if r.status_code < 400:
        return (r.status_code,)
    try:
        e = r.json()
    except ValueError:
        return (r.status_code, "<non-json>", r.text[:80])
    if isinstance(e, dict) and set(e) == {"detail"} and isinstance(e["detail"], str):
        # FastAPI's own answer (a body that is not UTF-8): the proxy gives the same words
        # OpenAI-shaped, with the type and code vLLM gives its other body errors (on purpose)
        return (r.status_code, "Bad Request", 400, None)
    e = e.get("error", e) if isinstance(e, dict) else e
    if not isinstance(e, dict):
        return (r.status_code, "<shape>", str(e)[:80])
    return (r.status_code, e.get("type"), e.get("code"), e.get("param"))


def message(r: httpx.Response, s: tuple[Any, ...]) -> Any:
    if r.status_code < 400 or s[1] == "<non-json>":
        return None
    e = r.json()
    if isinstance(e, dict) and set(e) == {"detail"}:
        return e["detail"]
    return e.get("error", {}).get("message") if isinstance(e, dict) else None


async def compare(url: str, verbose: bool, messages: bool) -> int:
    n, all_cases = 0, cases()
    s = Settings(upstreams=(url,), cache="off")
    async with proxy_client(s) as proxy, httpx.AsyncClient(base_url=url, timeout=120) as direct:
        for name, path, body in all_cases:
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            h = {"content-type": "application/json"}
            a = await direct.post(path, content=raw, headers=h)
            b = await proxy.post(path, content=raw, headers=h)
            sa, sb = shape(a), shape(b)
            ma, mb = message(a, sa), message(b, sb)
            if sa != sb:
                n += 1
                print(f"DIFF {name}\n   vllm : {sa}  {str(ma)[:150]!r}\n"
                      f"   proxy: {sb}  {str(mb)[:150]!r}")
            elif verbose or (ma != mb and messages):
                print(f"same {name} {sa}\n   vllm msg : {str(ma)[:200]!r}\n"
                      f"   proxy msg: {str(mb)[:200]!r}")
    print(f"{n} differences of {len(all_cases)} cases")
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.vllm_error_parity", description=__doc__)
    p.add_argument("url", nargs="?", default="http://127.0.0.1:18777")
    p.add_argument("-m", dest="messages", action="store_true")
    p.add_argument("-v", dest="verbose", action="store_true")
    a = p.parse_args(argv)
    asyncio.run(compare(a.url, a.verbose, a.messages))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
