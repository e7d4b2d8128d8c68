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


@record
class Derived:
    a: int
    b: list[int] = field(default_factory=list)
    total: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "total", self.a + sum(self.b))


def test_the_shared_init_behaves_like_the_generated_one() -> None:
    assert (
        Derived(1, [2, 3]).total == 6 and Derived(a=1).b == [] and Derived(1).b is not Derived(1).b
    )
    for bad in (
        lambda: Derived(),
        lambda: Derived(1, [], 3),
        lambda: Derived(1, a=2),
        lambda: Derived(1, c=2),
    ):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(dataclasses.FrozenInstanceError):
        del Derived(1).a
    assert dataclasses.replace(Derived(1, [1]), a=5).total == 6
    assert (
        copy.copy(Derived(2)) == Derived(2)
        and pickle.loads(pickle.dumps(Derived(2, [1]))).total == 3
    )


@given(st.integers(-3, 3), st.sampled_from("ab"), st.sampled_from(["", "n"]))
def test_every_field_given_positionally_is_the_generated_init(x: int, y: str, note: str) -> None:
    """The shared `__init__`'s shortcut (every field positional, nothing else to run) sets
    what the generated `__init__` does, and still refuses a call it would refuse."""
    ours, theirs = Point(x, y, note, "s", 1.0), Twin(x, y, note, "s", 1.0)
    assert [getattr(ours, f.name) for f in dataclasses.fields(Point)] == [
        getattr(theirs, f.name) for f in dataclasses.fields(Twin)
    ]
    assert ours == Point(x=x, y=y, note=note, secret="s", weight=1.0)
    for bad in (lambda: Point(x, y, note, "s", 1.0, 2), lambda: Point(x, y, note, "s", 1.0, y="b")):
        with pytest.raises(TypeError):
            bad()
