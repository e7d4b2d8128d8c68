"""Validating a config: pydantic over the config dataclasses, and errors that name the key path.

`memoryd.config` declares the models as plain dataclasses and never imports pydantic; this
module is the only one that does, and it is imported only by what must validate: a config file
that is new or changed (not in `memoryd.config_cache`), a scope or model built from a mapping
in code, the tests. pydantic validates stdlib dataclasses directly (each class's
`__pydantic_config__`: unknown keys forbidden, camelCase keys; the `Bounds`/`Check` markers in
the annotations; `__post_init__` for the checks across fields).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from . import config as cfg
from .errors import ConfigError

_T = TypeVar("_T")

#: pydantic's error types for a key the model does not have (models, dataclasses).
_UNKNOWN_KEY = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
#: … and for a required key that is missing.
_MISSING = frozenset({"missing", "missing_argument", "missing_keyword_only_argument"})


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def validate_model(cls: type[_T], data: Any, *, root: str = "", what: str = "config") -> _T:
    """`data` validated as `cls`; ConfigError("invalid <what>: <path>: <problem>; …")."""
    try:
        adapter = _adapter(cls)
        return typing.cast(_T, adapter.validate_python(data))
    except ValidationError as err:
        raise ConfigError(
            f"invalid {what}: {format_validation_error(err, root=root, model=cls)}"
        ) from None


_FIELD_TYPES: dict[type[Any], dict[str, Any]] = {}


def _field_types(cls: type[Any]) -> dict[str, Any]:
    """A model's field annotations, resolved once (in its module, as `get_type_hints` does)."""
    if cls not in _FIELD_TYPES:
        _FIELD_TYPES[cls] = typing.get_type_hints(cls)
    return _FIELD_TYPES[cls]


def _inner_model(annotation: Any) -> type[Any] | None:
    """The config model inside `X | None`, `list[X]`, `dict[str, X]` (None when there is none)."""
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _field_named(cls: type[Any], key: str) -> dataclasses.Field[Any] | None:
    """The field of `cls` written `key` (its camelCase key, or its own name)."""
    return next(
        (f for f in dataclasses.fields(cls) if f.init and key in (f.name, cfg.config_key(f.name))),
        None,
    )


def _model_at(model: type[Any], loc: Sequence[str | int]) -> type[Any] | None:
    """The config model that holds the key at `loc` (None when the path leaves the models)."""
    current: type[Any] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None:
            return None
        f = _field_named(current, part)
        if f is None:
            return None
        current = _inner_model(_field_types(current)[f.name])
    return current


def _unknown_key(model: type[Any] | None, loc: Sequence[str | int], key: str) -> str:
    """`unknown key`, with the closest known key of the model that holds it, or the sentence
    memoryd has for a key it refuses on purpose (`cfg.REMOVED_KEYS`)."""
    holder = _model_at(model, loc) if model is not None else None
    if holder is None:
        return "unknown key"
    removed = cfg.REMOVED_KEYS.get((holder.__name__, key))
    if removed:
        return removed
    known = [cfg.config_key(f.name) for f in dataclasses.fields(holder) if f.init]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")


def format_validation_error(
    err: ValidationError, *, root: str = "", model: type[Any] | None = None
) -> str:
    """One line per problem, each naming the offending key path (`agents.defaults.memorySearch…`).

    With `model`, an unknown key also suggests the closest known one (`maxResult` → `maxResults`).
    """
    lines = []
    for item in err.errors():
        parts = [p for p in item["loc"] if p != "__root__"]
        msg = item["msg"]
        if item["type"] in _UNKNOWN_KEY and parts:
            msg = _unknown_key(model, parts[:-1], str(parts[-1]))
        elif item["type"] in _MISSING:
            msg = "Field required"
        elif item["type"] == "value_error":
            # our validators' own sentences, without pydantic's "Value error, " in front
            msg = str(item.get("ctx", {}).get("error", msg.removeprefix("Value error, ")))
        loc = ".".join(str(part) for part in parts)
        path = ".".join(p for p in (root, loc) if p)
        lines.append(f"{path or '<root>'}: {msg}")
    return "; ".join(lines)


def as_written(cls: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` (keys camelCase or snake_case, as accepted) with every key in its camelCase form,
    nested models too: two such mappings merge key by key (`deep_merge`)."""
    types = _field_types(cls)
    out: dict[str, Any] = {}
    for key, value in data.items():
        f = _field_named(cls, key) if isinstance(key, str) else None
        if f is None:
            out[key] = value
            continue
        inner = _inner_model(types[f.name])
        if inner is not None and isinstance(value, Mapping) and not _is_mapping_of(types[f.name]):
            value = as_written(inner, value)
        out[cfg.config_key(f.name)] = value
    return out


def _is_mapping_of(annotation: Any) -> bool:
    """`dict[str, X]` (and `… | None`): its keys are names, not fields."""
    origin = typing.get_origin(annotation)
    if origin in (dict, Mapping):
        return True
    return any(_is_mapping_of(arg) for arg in typing.get_args(annotation) if arg is not type(None))


def _map_memory_search(data: Mapping[str, Any], what: str = "config") -> Mapping[str, Any]:
    """OpenClaw 2026.8+ keeps memory settings under `memory.search`: read them as
    `agents.defaults.memorySearch` (merged over it; `memory.search` wins), reporting problems at
    their own path (`memory.search.query.maxResult: unknown key (did you mean 'maxResults'?)`)."""
    memory = data.get("memory")
    if not isinstance(memory, Mapping) or "search" not in memory:
        return data
    search = memory["search"]
    if not isinstance(search, Mapping):
        raise ConfigError(f"invalid {what}: memory.search: must be a table/object")
    validate_model(cfg.MemorySearchConfig, search, root="memory.search", what=what)
    out = dict(data)
    out["memory"] = {k: v for k, v in memory.items() if k != "search"}
    agents = dict(out.get("agents") or {})
    defaults = dict(agents.get("defaults") or {})
    written = _defaults_search(defaults)
    defaults["memorySearch"] = cfg.deep_merge(written, as_written(cfg.MemorySearchConfig, search))
    agents["defaults"] = defaults
    out["agents"] = agents
    return out


def _defaults_search(defaults: dict[str, Any]) -> dict[str, Any]:
    """Take `agents.defaults.memorySearch` (or `memory_search`) out of `defaults`, as written."""
    raw: dict[str, Any] = {}
    for key in ("memory_search", "memorySearch"):
        value = defaults.pop(key, None)
        if isinstance(value, Mapping):
            raw = cfg.deep_merge(raw, as_written(cfg.MemorySearchConfig, value))
    return raw


def validate_whole(data: Mapping[str, Any], *, source: str = "config") -> cfg.MemorydConfig:
    """A whole config validated, each agent's overrides merged and validated too."""
    data = _map_memory_search(data, source)
    config = validate_model(cfg.MemorydConfig, data, what=source)
    fill_effective(config, data, what=source)
    return config


def fill_effective(
    config: cfg.MemorydConfig, data: Mapping[str, Any] | None = None, *, what: str = "config"
) -> None:
    """Set each `agents.list` entry's effective memorySearch and compaction: its overrides merged
    over what `agents.defaults` wrote (in `data`, the validated mapping; without it, every value
    of the defaults), then validated, an error naming the entry (`agents.list.1.memorySearch…`)."""
    if data is None:
        written = as_written(cfg.AgentDefaults, dataclasses.asdict(config.agents.defaults))
    else:
        agents = data.get("agents")
        found = agents.get("defaults") if isinstance(agents, Mapping) else None
        written = as_written(cfg.AgentDefaults, found) if isinstance(found, Mapping) else {}

    def merged(cls: type[_T], key: str, override: Mapping[str, Any], idx: int) -> _T:
        base = written.get(key)
        combined = cfg.deep_merge(
            base if isinstance(base, Mapping) else {}, as_written(cls, override)
        )
        return validate_model(cls, combined, root=f"agents.list.{idx}.{key}", what=what)

    for idx, entry in enumerate(config.agents.entries):
        if entry.memory_search is not None:
            entry.effective_memory_search = merged(
                cfg.MemorySearchConfig, "memorySearch", entry.memory_search, idx
            )
        if entry.compaction is not None:
            entry.effective_compaction = merged(
                cfg.CompactionConfig, "compaction", entry.compaction, idx
            )
