"""The evaluation's input: a file of labelled pairs, read and checked (format: the docstring
of evaluate.py, which `python -m proxy.cache.evaluate --help` prints). JSONL, or a JSON array
of the same objects; a UTF-8 BOM, CRLF, blank and `#` comment lines are read; anything else
is a PairsError naming the file and line, never a guess. Tested through the command
(tests/test_cache_evaluate.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson


class PairsError(ValueError):
    """A pairs file that cannot be read as labelled pairs: the message names file and line."""


_TRUE = ("true", "yes", "1")
_FALSE = ("false", "no", "0")


def _same(value: Any) -> bool:
    """The label: true/false, 1/0, or the strings "true"/"false", "yes"/"no", "1"/"0" (any
    case). Anything else is an error, never a guess (bool("false") is True)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError(f'"same" must be true or false (or 1/0, "yes"/"no"), not '
                     f"{orjson.dumps(value).decode()}")


EXAMPLE = '{"a": "How do I reverse a list?", "b": "reverse a python list", "same": true}'


def _checked(item: Any) -> dict[str, Any]:
    """One pair, checked: `a` and `b` strings, `same` a label, `family` (if any) a name."""
    if not isinstance(item, dict):
        raise ValueError(f"a pair is a JSON object such as {EXAMPLE}, not "
                         f"{type(item).__name__ if not isinstance(item, list) else 'an array'}")
    missing = [k for k in ("a", "b", "same") if k not in item]
    if missing:
        raise ValueError(f"missing {', '.join(repr(k) for k in missing)} (a pair is "
                         f"{EXAMPLE}; other fields are ignored)")
    for key in ("a", "b"):
        if not isinstance(item[key], str):
            raise ValueError(f'"{key}" must be a string (the question), not '
                             f"{orjson.dumps(item[key]).decode()}")
    pair = {**item, "same": _same(item["same"])}
    family = pair.get("family")
    if family is None:
        pair.pop("family", None)
    elif isinstance(family, (str, int)) and not isinstance(family, bool):
        pair["family"] = str(family)
    else:
        raise ValueError(f'"family" must be a string (a name), not {orjson.dumps(family).decode()}')
    return pair


def read_pairs(path: Path) -> list[dict[str, Any]]:
    """The labelled pairs of a JSONL file, checked; PairsError names the file and line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise PairsError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte order mark (Windows editors)
    if raw.lstrip().startswith(b"["):  # a JSON array of pairs instead of JSONL
        try:
            items = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise PairsError(f"{path}: not a JSON array ({exc}); the file should be JSONL, one "
                             f"pair per line: {EXAMPLE}") from None
        checked = []
        for number, item in enumerate(items, 1):
            try:
                checked.append(_checked(item))
            except ValueError as exc:
                raise PairsError(f"{path}: pair {number} of the array: {exc}") from None
        pairs = checked
    else:
        pairs = _lines(path, raw)
    if not pairs:  # no pairs: no numbers (the report would say precision and recall 1.0)
        raise PairsError(f"{path}: no pairs in it; one per line: {EXAMPLE}")
    return pairs


def _lines(path: Path, raw: bytes) -> list[dict[str, Any]]:
    pairs: list[dict[str, Any]] = []
    for number, line in enumerate(raw.splitlines(), 1):  # \n, \r\n or \r; not U+2028
        if not line.strip() or line.lstrip().startswith(b"#"):  # blank, or a comment
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            hint = " (CSV is not read)" if path.suffix.lower() in (".csv", ".tsv") else ""
            raise PairsError(f"{path}:{number}: not a JSON line ({exc}); the file must be JSONL, "
                             f"one pair per line: {EXAMPLE}{hint}") from None
        try:
            pairs.append(_checked(item))
        except ValueError as exc:
            raise PairsError(f"{path}:{number}: {exc}") from None
    return pairs
