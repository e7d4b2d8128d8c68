"""`core.records.record`: the same value semantics as `@dataclass(frozen=True, slots=True)`."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.records import record


@record
class Point:
    x: int
    y: str = "a"
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)
    weight: float = field(default=0.0, hash=False)


@dataclass(frozen=True, slots=True)
class Twin:
    x: int
    y: str = "a"
    note: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)
    weight: float = field(default=0.0, hash=False)


values = st.tuples(st.integers(-3, 3), st.sampled_from("ab"), st.sampled_from(["", "n"]))


@given(values, values, st.sampled_from([0.0, 1.0]))
def test_equality_hash_and_repr_match_the_generated_ones(
    a: tuple[int, str, str], b: tuple[int, str, str], w: float
) -> None:
    pa, pb = Point(*a, secret="s", weight=w), Point(*b, secret="s")
    ta, tb = Twin(*a, secret="s", weight=w), Twin(*b, secret="s")
    assert (pa == pb) == (ta == tb) and (pa != pb) == (ta != tb)
    assert hash(pa) == hash(ta)  # both hash the same tuple of fields
    assert repr(pa).replace("Point", "Twin", 1) == repr(ta)


def test_frozen_slotted_and_still_a_dataclass() -> None:
    p = Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    assert not hasattr(p, "__dict__") and dataclasses.is_dataclass(p)
    assert dataclasses.replace(p, x=2) == Point(2)
    assert pickle.loads(pickle.dumps(p)) == p and copy.deepcopy(p) == p
    assert (p == Twin(1)) is False and p.__eq__(Twin(1)) is NotImplemented
    assert {Point(1), Point(1, note="other")} == {Point(1)}
