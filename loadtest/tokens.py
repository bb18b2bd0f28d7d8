"""Optional tokenizer: sizes random prompts precisely and counts tokens when `usage` is missing."""

from __future__ import annotations

from typing import Any, Protocol


class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def special_ids(self) -> set[int]: ...


class HFTokenizer:
    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer  # slow import: only when asked for

        self._tok: Any = AutoTokenizer.from_pretrained(path)
        self.vocab_size = int(self._tok.vocab_size)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))

    def special_ids(self) -> set[int]:
        return set(self._tok.all_special_ids)


def count_tokens(tokenizer: Tokenizer | None, text: str) -> int | None:
    return None if tokenizer is None else len(tokenizer.encode(text))
