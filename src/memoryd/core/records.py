"""`record`: a frozen, slotted dataclass whose `__eq__`, `__hash__` and `__repr__` are shared.

`dataclasses` compiles every method it generates with `exec` (~0.3 ms apiece on Python 3.11
here). A frozen dataclass gets six (`__init__`, `__repr__`, `__eq__`, `__hash__`,
`__setattr__`, `__delattr__`); the ~40 on a one-off search's path cost ~20 ms of its 0.25 s.
`record` generates none: every class shares one `__init__`, the frozen guards, pickling, and
the same value semantics: equal when the class and every compared field are equal, the hash of
those fields, and the dataclass `repr`. Python 3.13's `dataclasses`
generates its methods in one `exec`; this can go when memoryd requires it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final, TypeVar, dataclass_transform

_T = TypeVar("_T")

#: Per class: (names compared, names hashed, names shown), worked out on first use.
_NAMES: Final[dict[type[Any], tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]] = {}


def _names(cls: type[Any]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    names = _NAMES.get(cls)
    if names is None:
        fields = dataclasses.fields(cls)
        names = (
            tuple(f.name for f in fields if f.compare),
            tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash)),
            tuple(f.name for f in fields if f.repr),
        )
        _NAMES[cls] = names
    return names


def value_eq(self: Any, other: Any) -> Any:  # bool, or NotImplemented
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = _names(type(self))[0]
    return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in _names(type(self))[1]))


def value_repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in _names(type(self))[2])
    return f"{type(self).__qualname__}({shown})"


#: Per class: the fields `__init__` takes, in order, and those it does not.
_INIT: Final[dict[type[Any], tuple[tuple[dataclasses.Field[Any], ...], tuple[Any, ...]]]] = {}


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


#: Per class: the field names, when a call giving each of them positionally is all `__init__`
#: has to do (no field outside `__init__`, no `__post_init__`); None otherwise.
_POSITIONAL: Final[dict[type[Any], tuple[str, ...] | None]] = {}


def dataclass_init(self: Any, *args: Any, **kwargs: Any) -> None:
    """The dataclass `__init__`, for any dataclass (frozen or not): positional or keyword
    arguments, defaults, a fresh value from each factory, then `__post_init__`.

    A call that gives every field positionally, to a class with nothing else to do, only sets
    them: a search builds ~50 rows so (`ChunkRow(*row)`), at ~1 µs each instead of ~8 µs."""
    cls = type(self)
    if cls not in _INIT:
        every = dataclasses.fields(cls)
        _INIT[cls] = (tuple(f for f in every if f.init), tuple(f for f in every if not f.init))
        plain = not _INIT[cls][1] and not hasattr(cls, "__post_init__")
        _POSITIONAL[cls] = tuple(f.name for f in _INIT[cls][0]) if plain else None
    names = _POSITIONAL[cls]
    if names is not None and not kwargs and len(args) == len(names):
        for name, value in zip(names, args, strict=True):
            object.__setattr__(self, name, value)
        return
    takes, rest = _INIT[cls]
    if len(args) > len(takes):
        raise TypeError(f"{cls.__name__}() takes {len(takes)} positional arguments")
    for f, value in zip(takes, args, strict=False):
        if f.name in kwargs:
            raise TypeError(f"{cls.__name__}() got multiple values for argument {f.name!r}")
        kwargs[f.name] = value
    for f in takes:
        value = kwargs.pop(f.name) if f.name in kwargs else _default(f)
        if value is dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}() missing required argument: {f.name!r}")
        object.__setattr__(self, f.name, value)
    if kwargs:
        raise TypeError(
            f"{cls.__name__}() got an unexpected keyword argument {next(iter(kwargs))!r}"
        )
    for f in rest:
        value = _default(f)
        if value is not dataclasses.MISSING:
            object.__setattr__(self, f.name, value)
    post_init = getattr(self, "__post_init__", None)
    if post_init is not None:
        post_init()


def _setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=True):
        object.__setattr__(self, f.name, value)


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[_T]) -> type[_T]:
    """`@dataclass(frozen=True, slots=True)`, every method shared (see above): `__init__`
    (positional or keyword, defaults, factories, `__post_init__`), the frozen guards raising
    `FrozenInstanceError`, pickling by field values, and the value methods."""
    for name, fn in (
        ("__init__", dataclass_init),
        ("__eq__", value_eq),
        ("__hash__", _hash),
        ("__repr__", value_repr),
        ("__setattr__", _setattr),
        ("__delattr__", _delattr),
        ("__getstate__", _getstate),
        ("__setstate__", _setstate),
    ):
        setattr(cls, name, fn)
    return dataclasses.dataclass(init=False, repr=False, eq=False, slots=True)(cls)
