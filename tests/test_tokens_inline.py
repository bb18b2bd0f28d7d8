"""Which chats are tokenized on the event loop and which in a worker thread (no model needed)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from proxy.tokens import LocalCounter


class _Tok:
    """Records the thread that templated the chat."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    def apply_chat_template(self, messages: Any, **kw: Any) -> str:
        self.threads.append(threading.current_thread())
        return "x"

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [1]


@pytest.mark.parametrize(("messages", "tools", "inline"), [
    ([{"role": "user", "content": "hi"}], None, True),
    ([{"role": "user", "content": "x" * 5000}], None, False),
    ([{"role": "user", "content": ""}] * 1000, None, False),  # many empty messages
    ([{"role": "user", "content": "hi"}], [{"type": "function", "function": {
        "name": "f", "description": "d" * 5000}}], False),  # big tools
])
async def test_big_chats_are_templated_off_the_loop(messages: Any, tools: Any,
                                                     inline: bool) -> None:
    tok = _Tok()
    await LocalCounter(tok).count_chat("m", messages, tools)
    assert (tok.threads[0] is threading.main_thread()) is inline
