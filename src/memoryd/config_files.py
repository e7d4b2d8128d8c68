"""Config files: finding and reading them, and the validated configs cached by their exact bytes
(rebuilt without pydantic, whose import costs a one-off search more than the search; a config
carrying credentials is never cached)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from . import config, config_validation, paths
from .config import MemorydConfig, validate_config
from .config_validation import MODELS
from .errors import ConfigError, StateError


def load_config(explicit: str | os.PathLike[str] | None = None) -> MemorydConfig:
    """`explicit` (`--config`), `MEMORYD_CONFIG` or `<config dir>/config.toml`; else defaults.
    A memoryd TOML file, or an OpenClaw JSON/JSON5 file (memory keys only)."""
    path = paths.config_file(explicit)
    if path is None:
        return MemorydConfig()
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror}") from None
    try:  # the file's name says which config; the key, which bytes and which memoryd code
        key = hashlib.sha256(_code_fingerprint() + raw).hexdigest()
    except OSError:  # no source to fingerprint (a frozen build): validate every time
        return _parse_config_file(path, raw)
    name = hashlib.sha256(os.fsencode(path.absolute())).hexdigest()[:24]
    target = paths.config_cache_dir() / f"{name}.json"
    cached = _load(target, key)
    if cached is not None:
        return cached
    validated = _parse_config_file(path, raw)
    _store(target, key, validated)
    return validated


# OpenClaw configs carry many unrelated keys (gateway, channels, …); take only the memory ones.
_OPENCLAW_AGENT_KEYS = ("id", "workspace", "workspaceAccess", "memorySearch", "compaction")
_OPENCLAW_DEFAULT_KEYS = (*_OPENCLAW_AGENT_KEYS[1:], "bootstrapMaxChars", "bootstrapTotalMaxChars")
#: OpenClaw 2026.8+'s keyed `agents.entries.<id>` (a retired `memorySearch` is refused with its reason).
_OPENCLAW_KEYED_KEYS = (*_OPENCLAW_AGENT_KEYS[1:], "memory")


def _pick(mapping: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    return {k: mapping[k] for k in keys if k in mapping}


def _openclaw_subset(raw: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(raw, ["memory"])
    agents = raw.get("agents")
    if isinstance(agents, Mapping):
        sub: dict[str, Any] = {}
        if isinstance(defaults := agents.get("defaults"), Mapping):
            sub["defaults"] = _pick(defaults, _OPENCLAW_DEFAULT_KEYS)
        if isinstance(entries := agents.get("list"), list):
            sub["list"] = [
                _pick(e, _OPENCLAW_AGENT_KEYS) for e in entries if isinstance(e, Mapping)
            ]
        if isinstance(keyed := agents.get("entries"), Mapping):
            sub["entries"] = {
                agent_id: _pick(e, _OPENCLAW_KEYED_KEYS) if isinstance(e, Mapping) else e
                for agent_id, e in keyed.items()
            }
        out["agents"] = sub
    models = raw.get("models")
    if isinstance(models, Mapping) and isinstance(providers := models.get("providers"), Mapping):
        keep = ("apiKey", "baseUrl", "headers")
        picked = {n: _pick(e, keep) for n, e in providers.items() if isinstance(e, Mapping)}
        out["models"] = {"providers": picked}
    return out


def _parse_config_file(path: Path, raw: bytes) -> MemorydConfig:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 ({err.reason})") from None
    if path.suffix.lower() in (".json", ".json5"):
        import json5

        try:
            data = json5.loads(text)
        except ValueError as err:
            raise ConfigError(f"cannot parse {path}: {err}") from None
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: top level must be an object")
        return validate_config(_openclaw_subset(data), source=str(path))
    import tomllib  # here: a config from the cache is never parsed

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"cannot parse {path}: {err}") from None
    return validate_config(data, source=str(path))


#: Largest cache file read back (a config of this size would be absurd).
_MAX_BYTES: Final = 4 << 20
#: The key that marks a model in the JSON (no model has a field of that name).
_MODEL: Final = "__model__"
#: Fields that may hold credentials: a config with any of them set is never cached.
_CREDENTIAL_FIELDS: Final = frozenset({"api_key", "headers"})


@functools.cache
def _code_fingerprint() -> bytes:
    digest = hashlib.sha256()
    for module in (config, config_validation):
        digest.update(Path(module.__file__ or "").read_bytes())
    digest.update(Path(__file__).read_bytes())
    return digest.digest()  # fixed length: the config's bytes follow it unambiguously


def _rebuild(obj: dict[str, Any]) -> Any:
    """A JSON object read back: a model by its constructor, or the mapping it is."""
    if _MODEL not in obj:
        return obj
    cls = MODELS[obj.pop(_MODEL)]
    if set(obj) != {f.name for f in dataclasses.fields(cls)}:
        raise ValueError(f"{cls.__name__}: fields differ from this memoryd's")
    return cls(**obj)


def _load(target: Path, key: str) -> MemorydConfig | None:
    """The validated config cached under `key`, or None."""
    from .fsio import open_private

    try:
        # a cache file planted by someone else would choose this process's config
        f = open_private(target)
    except (OSError, ValueError, StateError):
        return None
    with f:
        try:
            st = os.fstat(f.fileno())
            if st.st_uid != os.geteuid() or st.st_size > _MAX_BYTES:
                return None
            record = json.loads(f.read(), object_hook=_rebuild)
            found = record["config"] if record.get("key") == key else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
    return found if isinstance(found, MemorydConfig) else None


class _Secret(Exception):
    """A config that holds a credential: it is not cached."""


def _fields(value: Any) -> dict[str, Any]:
    """A model as a JSON object (`json.dumps`' hook for what JSON has no type for)."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        raise TypeError(f"a value of type {type(value).__name__}")
    out: dict[str, Any] = {_MODEL: type(value).__name__}
    for f in dataclasses.fields(value):
        out[f.name] = getattr(value, f.name)
        if f.name in _CREDENTIAL_FIELDS and out[f.name]:
            raise _Secret
    return out


def _store(target: Path, key: str, validated: MemorydConfig) -> None:
    """Cache a config that has just validated (best effort: never fails the caller)."""
    from .fsio import private_dir, write_private_atomic

    try:
        data = json.dumps({"key": key, "config": validated}, default=_fields)
    except (_Secret, TypeError, ValueError):
        return
    with contextlib.suppress(StateError, OSError):
        private_dir(target.parent)
        write_private_atomic(target, data.encode())
