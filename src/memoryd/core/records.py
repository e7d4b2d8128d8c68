"""`record`: a frozen, slotted dataclass whose `__eq__`, `__hash__` and `__repr__` are shared.

`dataclasses` compiles every method it generates with `exec` (~0.3 ms apiece on Python 3.11
here). A frozen dataclass gets six (`__init__`, `__repr__`, `__eq__`, `__hash__`,
`__setattr__`, `__delattr__`); the ~40 on a one-off search's path cost ~20 ms of its 0.25 s.
`record` generates only `__init__` and the frozen guards, and gives every class the same
value semantics through three shared functions: equal when the class and every compared field
are equal, the hash of those fields, and the dataclass `repr`. Python 3.13's `dataclasses`
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


def _eq(self: Any, other: Any) -> Any:  # bool, or NotImplemented
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = _names(type(self))[0]
    return tuple(getattr(self, n) for n in compared) == tuple(getattr(other, n) for n in compared)


def _hash(self: Any) -> int:
    return hash(tuple(getattr(self, n) for n in _names(type(self))[1]))


def _repr(self: Any) -> str:
    shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in _names(type(self))[2])
    return f"{type(self).__qualname__}({shown})"


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[_T]) -> type[_T]:
    """`@dataclass(frozen=True, slots=True)`, with the shared value methods (see above)."""
    cls.__eq__ = _eq  # type: ignore[method-assign]
    cls.__hash__ = _hash  # type: ignore[method-assign]
    cls.__repr__ = _repr  # type: ignore[method-assign]
    return dataclasses.dataclass(frozen=True, slots=True, eq=False, repr=False)(cls)
