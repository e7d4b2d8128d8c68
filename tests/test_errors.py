"""The error tree: stable codes, and one way to and from the tools' failure result."""

from __future__ import annotations

import pytest

from memoryd import errors
from memoryd.errors import (
    BatchPending,
    InvalidInput,
    InvalidMemoryWrite,
    MemorydError,
    QmdExitError,
    QmdTimeout,
)


def every_class() -> list[type[MemorydError]]:
    out, todo = [], [MemorydError]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def test_a_failure_becomes_the_tool_result_with_what_the_caller_adds() -> None:
    err = QmdTimeout("qmd search timed out after 4.0s")
    assert err.to_result() == {
        "disabled": True,
        "error": "qmd search timed out after 4.0s",
        "code": "qmd_timeout",
    }
    assert err.to_result(results=[], path="MEMORY.md") == {
        "results": [],
        "path": "MEMORY.md",
        "disabled": True,
        "error": "qmd search timed out after 4.0s",
        "code": "qmd_timeout",
    }


@pytest.mark.parametrize("cls", every_class(), ids=lambda c: c.__name__)
def test_every_error_comes_back_from_its_result_as_the_class_of_its_code(
    cls: type[MemorydError],
) -> None:
    back = MemorydError.from_result(cls("it failed").to_result())
    assert str(back) == "it failed"
    assert back.code == cls.code
    # a class that inherits its code (InvalidMemoryWrite) comes back as the class declaring it
    declared = next(c for c in cls.__mro__ if "code" in vars(c))
    assert type(back) is declared


def test_a_result_with_an_unknown_or_no_code_is_a_plain_memoryd_error() -> None:
    for result in ({"disabled": True, "error": "x", "code": "from_the_future"}, {"error": "x"}):
        back = MemorydError.from_result(result)
        assert type(back) is MemorydError and str(back) == "x"


def test_errors_with_fields_of_their_own_keep_them_default_when_rebuilt() -> None:
    back = MemorydError.from_result(QmdExitError("exit 2", returncode=2).to_result())
    assert isinstance(back, QmdExitError) and back.returncode is None and back.stderr == ""
    pending = MemorydError.from_result(BatchPending("waiting", ["job-1"]).to_result())
    assert isinstance(pending, BatchPending) and pending.job_ids == []


def test_codes_are_declared_once_and_inherited_when_not() -> None:
    assert InvalidMemoryWrite.code == InvalidInput.code == "invalid_input"
    assert errors.CODES["qmd_timeout"] is QmdTimeout
    assert set(errors.CODES) == {c.code for c in every_class()}
