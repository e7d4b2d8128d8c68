"""Config models are dataclasses that pydantic validates on demand, so building one in code
imports no pydantic; unknown keys are refused and every error names its key's path."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, dataclass_transform

from .errors import ConfigError

if TYPE_CHECKING:
    from pydantic import GetCoreSchemaHandler, TypeAdapter, ValidationError
    from pydantic_core import CoreSchema

_T = TypeVar("_T")


def config_key(name: str) -> str:
    """The key a field is written as: `max_results` → `maxResults`, `lambda_` → `lambda`."""
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


#: Every config model by class name (what the config cache rebuilds).
MODELS: Final[dict[str, type[Any]]] = {}
_PYDANTIC_CONFIG: Final = {
    "extra": "forbid",
    "alias_generator": config_key,
    "populate_by_name": True,
}


@dataclass_transform(kw_only_default=True, field_specifiers=(dataclasses.field,))
def model(cls: type[_T]) -> type[_T]:
    """A config model: a `value_class` pydantic validates with unknown keys forbidden; a class
    attribute `removed_keys` ({key: reason}) refuses keys with a sentence of their own."""
    cls.__pydantic_config__ = _PYDANTIC_CONFIG  # type: ignore[attr-defined]
    out = value_class(cls)
    MODELS[out.__name__] = out
    return out


@dataclass_transform(kw_only_default=True, field_specifiers=(dataclasses.field,))
def value_class(cls: type[_T]) -> type[_T]:
    """A keyword-only dataclass whose `__init__`, `__eq__` and `__repr__` are shared, with the
    dataclass behaviour: `dataclasses` compiles each generated method with `exec`, for every
    config class at every start."""
    cls.__doc__ = cls.__doc__ or cls.__name__  # else dataclass writes one with inspect.signature
    out: Any = dataclasses.dataclass(cls, init=False, repr=False, eq=False)
    out.__init__ = functools.partialmethod(_init, dataclasses.fields(out))
    out.__eq__ = _eq
    out.__hash__ = None  # mutable and compared by value
    out.__repr__ = _repr
    return typing.cast(type[_T], out)


def _init(self: Any, fields: tuple[dataclasses.Field[Any], ...], **kwargs: Any) -> None:
    name = type(self).__name__
    for f in fields:
        if f.name in kwargs:
            value = kwargs.pop(f.name)
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            raise TypeError(f"{name}() missing required argument: {f.name!r}")
        setattr(self, f.name, value)
    if kwargs:
        raise TypeError(f"{name}() got an unexpected keyword argument {next(iter(kwargs))!r}")
    if hasattr(self, "__post_init__"):
        self.__post_init__()


def _values(obj: Any) -> tuple[Any, ...]:
    return tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


def _eq(self: Any, other: Any) -> Any:  # bool, or NotImplemented
    if other.__class__ is not self.__class__:
        return NotImplemented
    return _values(self) == _values(other)


def _repr(self: Any) -> str:
    shown = ", ".join(
        f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self) if f.repr
    )
    return f"{type(self).__qualname__}({shown})"


class Bounds:
    """Annotation marker: numeric bounds pydantic checks (`Annotated[int, Bounds(ge=1)]`)."""

    def __init__(
        self, *, ge: float | None = None, gt: float | None = None, le: float | None = None
    ) -> None:
        self.limits = {k: v for k, v in (("ge", ge), ("gt", gt), ("le", le)) if v is not None}

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        schema = handler(source)
        if schema.get("type") not in ("int", "float"):
            raise TypeError(f"Bounds applies to int and float fields, not {source!r}")
        return {**schema, **self.limits}


class Check:
    """Annotation marker: a function pydantic runs on the validated value (ValueError = invalid)."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(self.fn, handler(source))


_ADAPTERS: Final[dict[type[Any], TypeAdapter[Any]]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    if cls not in _ADAPTERS:
        from pydantic import TypeAdapter

        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def validate(cls: type[_T], data: Any, *, root: str = "", what: str = "config") -> _T:
    """`data` validated as the model `cls`; ConfigError("invalid <what>: <path>: <problem>; …")."""
    from pydantic import ValidationError

    try:
        return typing.cast(_T, _adapter(cls).validate_python(data))
    except ValidationError as err:
        raise ConfigError(f"invalid {what}: {_describe(err, cls, root)}") from None


_UNKNOWN_KEY: Final = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
_MISSING: Final = frozenset({"missing", "missing_argument", "missing_keyword_only_argument"})


def _describe(err: ValidationError, cls: type[Any], root: str) -> str:
    """One problem after another, each naming its key path (`agents.defaults.memorySearch…`)."""
    lines = []
    for item in err.errors():
        loc = item["loc"]
        msg = item["msg"]
        if item["type"] in _UNKNOWN_KEY and loc:
            msg = _unknown_key(_model_at(cls, loc[:-1]), str(loc[-1]))
        elif item["type"] in _MISSING:
            msg = "Field required"
        elif item["type"] == "value_error":
            # our validators' own sentences, without pydantic's "Value error, " in front
            msg = str(item.get("ctx", {}).get("error", msg.removeprefix("Value error, ")))
        path = ".".join(p for p in (root, ".".join(str(part) for part in loc)) if p)
        lines.append(f"{path or '<root>'}: {msg}")
    return "; ".join(lines)


def _unknown_key(holder: type[Any] | None, key: str) -> str:
    """`unknown key` with the closest known key, or the model's reason for refusing it."""
    if holder is None:
        return "unknown key"
    removed: Mapping[str, str] = getattr(holder, "removed_keys", {})
    if key in removed:
        return removed[key]
    import difflib

    known = [config_key(f.name) for f in dataclasses.fields(holder)]
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return "unknown key" + (f" (did you mean {close[0]!r}?)" if close else "")


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
    return next((f for f in dataclasses.fields(cls) if key in (f.name, config_key(f.name))), None)


def _model_at(cls: type[Any] | None, loc: Sequence[str | int]) -> type[Any] | None:
    """The config model that holds the key at `loc` (None when the path leaves the models)."""
    for part in loc:
        if isinstance(part, int):
            continue
        if cls is None or (f := _field_named(cls, part)) is None:
            return None
        cls = _inner_model(typing.get_type_hints(cls)[f.name])
    return cls


def as_written(cls: type[Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with every key of `cls` and its nested models in its camelCase form (a key
    written both ways merges), so that two such mappings merge key by key (`deep_merge`)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        f = _field_named(cls, key) if isinstance(key, str) else None
        if f is None:
            out[key] = value
            continue
        annotation = typing.get_type_hints(cls)[f.name]
        inner = _inner_model(annotation)
        if inner is not None and isinstance(value, Mapping) and not _is_mapping_of(annotation):
            value = as_written(inner, value)
        key = config_key(f.name)
        both = isinstance(value, Mapping) and isinstance(out.get(key), Mapping)
        out[key] = deep_merge(out[key], value) if both else value
    return out


def _is_mapping_of(annotation: Any) -> bool:
    """`dict[str, X]` (and `… | None`): its keys are names, not fields."""
    if typing.get_origin(annotation) in (dict, Mapping):
        return True
    return any(_is_mapping_of(arg) for arg in typing.get_args(annotation) if arg is not type(None))


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge `override` over `base` (dicts merge, everything else replaces)."""
    out: dict[str, Any] = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
