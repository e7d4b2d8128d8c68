"""The validated-config cache: a config file validated once is not validated again until it changes.

Validating the config imports pydantic (~0.2 s) and runs its validators for ~40 models: more
than the search itself in every one-off command (`memoryd search`). After a file validates,
its validated form is written to `<state>/config-cache/` (one private JSON file per config
path). The next process that reads the *same bytes* with the *same memoryd* rebuilds the
config dataclasses from it by calling their constructors (the checks across fields in their
`__post_init__` run again; nothing imports pydantic), each agent's merged overrides included.

The key is the sha256 of the config file's bytes, its path and a fingerprint of the code that
defines and validates the models (`config.py`, `config_validation.py`): an edited config,
another path or another memoryd version all miss and validate. A config that carries
credentials (an API key or HTTP headers anywhere) is never cached: memoryd does not copy secrets
out of the file the user keeps them in. A cache file that does not parse, does not match, or is
not ours (owner, symlink) is ignored; a state folder that cannot be written just means no
cache. Nothing here can make an invalid config pass: only what validated is ever written.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from . import paths
from .errors import StateError

#: Bump when the file format below changes.
FORMAT: Final = 2
#: Largest cache file read back (a config of this size would be absurd).
_MAX_BYTES: Final = 4 << 20


class _Unfreezable(Exception):
    """A value of a type the cache does not carry: the config is simply not cached."""


def freeze(value: Any, secret_fields: frozenset[str] = frozenset()) -> Any:
    """A JSON-ready form of a validated config tree that `thaw` turns back into the same tree.

    A field named in `secret_fields` that holds anything (an API key, HTTP headers) makes the
    tree unfreezable: a config carrying credentials is never copied into the state folder.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            field_value = getattr(value, f.name)
            if f.name in secret_fields and field_value:
                raise _Unfreezable(f"{type(value).__name__}.{f.name} holds a credential")
            out[f.name] = freeze(field_value, secret_fields)
        return {"m": type(value).__name__, "v": out}
    if isinstance(value, list):
        return {"l": [freeze(v, secret_fields) for v in value]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _Unfreezable("a mapping with non-string keys")
        return {"d": {k: freeze(v, secret_fields) for k, v in value.items()}}
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise _Unfreezable(f"a value of type {type(value).__name__}")


def thaw(data: Any, models: Mapping[str, type[Any]]) -> Any:
    """The config tree `freeze` wrote (raises KeyError/TypeError/ValueError on anything else)."""
    if not isinstance(data, dict):
        if data is None or isinstance(data, (str, bool, int, float)):
            return data
        raise TypeError(f"unexpected {type(data).__name__}")
    if "l" in data:
        return [thaw(v, models) for v in data["l"]]
    if "d" in data:
        return {k: thaw(v, models) for k, v in data["d"].items()}
    cls = models[data["m"]]
    values = {name: thaw(v, models) for name, v in data["v"].items()}
    fields = dataclasses.fields(cls)
    if set(values) != {f.name for f in fields}:
        raise ValueError(f"{cls.__name__}: fields differ from this memoryd's")
    obj = cls(**{f.name: values[f.name] for f in fields if f.init})
    for f in fields:
        if not f.init:  # filled in by validation (an agent's merged overrides)
            setattr(obj, f.name, values[f.name])
    return obj


@functools.cache
def code_fingerprint(*modules: str) -> str:
    """sha256 of the named modules' source files (the code whose models the cache holds)."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


def _key(config_path: Path, raw: bytes, fingerprint: str) -> str:
    digest = hashlib.sha256()
    for part in (str(FORMAT).encode(), fingerprint.encode(), os.fsencode(config_path), raw):
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.hexdigest()


def _cache_file(config_path: Path) -> Path:
    name = hashlib.sha256(os.fsencode(config_path)).hexdigest()[:24]
    return paths.config_cache_dir() / f"{name}.json"


def load(
    config_path: Path, raw: bytes, fingerprint: str, models: Mapping[str, type[Any]]
) -> Any | None:
    """The validated config cached for exactly these bytes at this path, or None."""
    from .fsio import open_private

    try:
        # no link followed below the state root, every folder on the way checked: a cache
        # planted by someone else would choose this process's config
        f = open_private(_cache_file(config_path))
    except (OSError, ValueError, StateError):
        return None
    with f:
        try:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_size > _MAX_BYTES:
                return None
            record = json.loads(f.read())
            if record.get("key") != _key(config_path, raw, fingerprint):
                return None
            model = thaw(record["config"], models)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
    return model if dataclasses.is_dataclass(model) else None


def store(
    config_path: Path,
    raw: bytes,
    fingerprint: str,
    config: Any,
    secret_fields: frozenset[str] = frozenset(),
) -> None:
    """Cache a config that has just validated (best effort: never fails the caller).

    Not cached: a config that holds a value in any of `secret_fields` (see `freeze`).
    """
    from .fsio import private_dir, write_private_atomic

    try:
        frozen = freeze(config, secret_fields)
        record = {"key": _key(config_path, raw, fingerprint), "config": frozen}
        data = json.dumps(record, separators=(",", ":"), allow_nan=True).encode()
    except _Unfreezable:
        return
    target = _cache_file(config_path)
    with contextlib.suppress(StateError, OSError):
        private_dir(target.parent)
        write_private_atomic(target, data)
