"""docs/configuration.md names every key the config models accept, and no key they do not."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path
from typing import Any

from memoryd import config
from memoryd.config_validation import config_key

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"

#: Where the doc writes a subtree relative to its section instead of in full.
SHORT = {
    "agents.defaults.memorySearch.": "",
    "agents.defaults.compaction.": "compaction.",
}


def _model_in(annotation: Any) -> tuple[type[Any] | None, str]:
    """The config model inside an annotation, and how its keys continue the path."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation, "."
    if origin is dict:
        inner, _ = _model_in(args[1])
        return inner, ".<name>."
    if origin is list:
        inner, _ = _model_in(args[0])
        return inner, "[]."
    for arg in args:
        inner, join = _model_in(arg)
        if inner is not None:
            return inner, join
    return None, ""


def key_paths(*, leaves_only: bool = False) -> list[str]:
    """Every key of the config file as the doc writes it (`leaves_only`: not the tables)."""
    out: list[str] = []
    seen: set[type[Any]] = set()

    def walk(cls: type[Any], prefix: str) -> None:
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            path = prefix + config_key(f.name)
            inner, join = _model_in(hints[f.name])
            if inner is None or not leaves_only:
                out.append(path)
            if inner is not None and inner not in seen:  # a model met twice is documented once
                walk(inner, path + join)

    walk(config.MemorydConfig, "")
    short = []
    for path in out:
        for full, doc in SHORT.items():
            if path.startswith(full):
                path = doc + path.removeprefix(full)
        short.append(path)
    return short


def documented() -> set[str]:
    """The keys in the first column of the doc's tables."""
    rows = re.findall(r"^\| `([^`]+)` \|", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    return set(rows)


def test_every_key_is_documented() -> None:
    missing = [p for p in key_paths(leaves_only=True) if p not in documented()]
    assert not missing, f"docs/configuration.md lacks {missing}"


def test_every_documented_key_exists() -> None:
    known = set(key_paths())
    extra = sorted(k for k in documented() if not k.isupper() and k not in known)  # not env vars
    assert not extra, f"docs/configuration.md names keys the config does not have: {extra}"
