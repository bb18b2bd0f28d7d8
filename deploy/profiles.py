"""Backend profiles: TOML files in deploy/profiles/ with a [serve] table of vLLM flags."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROFILES_DIR = Path(__file__).parent / "profiles"


class ProfileError(Exception):
    pass


@dataclass(frozen=True)
class Profile:
    name: str
    path: Path
    description: str
    target: str  # "gpu" or "cpu"
    serve: dict[str, Any] = field(default_factory=dict)


def profile_names(directory: Path = PROFILES_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.toml"))


def load_profile(name: str, directory: Path = PROFILES_DIR) -> Profile:
    path = Path(name) if name.endswith(".toml") else directory / f"{name}.toml"
    if not path.is_file():
        known = ", ".join(profile_names(directory))
        raise ProfileError(f"unknown profile {name!r}; known: {known}")
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: {exc}") from exc
    serve = data.get("serve")
    if not isinstance(serve, dict):
        raise ProfileError(f"{path}: missing [serve] table")
    target = data.get("target", "gpu")
    if target not in ("gpu", "cpu"):
        raise ProfileError(f"{path}: target must be 'gpu' or 'cpu', not {target!r}")
    return Profile(name=path.stem, path=path, description=str(data.get("description", "")),
                   target=target, serve=dict(serve))


def parse_value(text: str) -> Any:
    """A --set value: true/false, an integer, a float, a JSON object/list, or the string."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    if text[:1] in "{[":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text  # validation reports it with the flag's name
    return text


def apply_overrides(serve: dict[str, Any], items: list[str]) -> dict[str, Any]:
    """KEY=VALUE sets a flag; KEY= drops it; a.b=VALUE sets key b inside the JSON flag a."""
    out = dict(serve)
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip().removeprefix("--")
        if not sep or not key:
            raise ProfileError(f"--set wants KEY=VALUE, got {item!r}")
        if text == "":
            out.pop(key, None)
            continue
        flag, dot, sub = key.partition(".")
        if not dot:
            out[key] = parse_value(text)
            continue
        inner = out.get(flag, {})
        if isinstance(inner, str):
            try:
                inner = json.loads(inner)
            except json.JSONDecodeError as exc:
                raise ProfileError(f"--set {item}: --{flag} is not a JSON object") from exc
        if not isinstance(inner, dict):
            raise ProfileError(f"--set {item}: --{flag} is not a JSON object")
        out[flag] = {**inner, sub: parse_value(text)}
    return out


def _show(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return str(value).lower() if isinstance(value, bool) else str(value)


def list_table(directory: Path = PROFILES_DIR) -> str:
    profiles = [load_profile(n, directory) for n in profile_names(directory)]
    width = max(len(p.name) for p in profiles)
    return "\n".join(f"{p.name:<{width}}  {p.target:<3}  {p.description}" for p in profiles)


def diff_table(names: list[str], directory: Path = PROFILES_DIR, *, all_keys: bool = False) -> str:
    """Flags side by side; only those that differ unless all_keys (or a single profile)."""
    profiles = [load_profile(n, directory) for n in names]
    keys: list[str] = []
    for p in profiles:
        keys += [k for k in p.serve if k not in keys]
    rows = [["flag", *(p.name for p in profiles)]]
    for key in keys:
        values = [_show(p.serve.get(key)) for p in profiles]
        if all_keys or len(profiles) == 1 or len(set(values)) > 1:
            rows.append([key, *values])
    if len(rows) == 1:
        return "no differences"
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows)
