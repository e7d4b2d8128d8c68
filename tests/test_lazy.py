"""`memoryd.lazy`: a module loaded on first use, once, and whole for every thread.

A long-lived process (MCP, serve) may touch numpy first from two threads at once: its
background sync embeds documents while its first search loads the query encoder. With Python
3.11's `LazyLoader` the second thread saw a half-executed numpy (`cannot import name 'dtype'`,
seen through the MCP Inspector). A module that takes a while to execute stands in for numpy.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from memoryd.lazy import _lazy


@pytest.fixture
def slow_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package that counts its executions and takes 0.4 s between its first and last name."""
    name = f"memoryd_slow_{uuid.uuid4().hex}"
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        "import time\n"
        f"import {name} as me  # a module that reads itself while it executes\n"
        "runs = [1]\n"
        "first = me.runs\n"
        "time.sleep(0.4)\n"
        "last = 2\n"
    )
    (pkg / "sub.py").write_text(f"from {name} import last\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)
    sys.modules.pop(f"{name}.sub", None)


def test_nothing_executes_before_first_use(slow_module: str) -> None:
    t = time.monotonic()
    mod = _lazy(slow_module)
    assert time.monotonic() - t < 0.3 and sys.modules[slow_module] is mod
    assert mod.last == 2 and mod.first == [1]
    assert type(mod) is type(sys)  # a plain module once loaded


def test_other_threads_wait_for_the_whole_module(slow_module: str) -> None:
    mod = _lazy(slow_module)
    errors: list[BaseException] = []
    seen: list[object] = []

    def use() -> None:
        seen.append(mod.last)

    def import_from() -> None:
        time.sleep(0.1)  # while the first thread executes the module
        try:
            seen.append(importlib.import_module(f"{slow_module}.sub").last)
            seen.append(__import__(slow_module, fromlist=["last"]).last)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=use), threading.Thread(target=import_from)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert errors == []
    assert seen == [2, 2, 2]
    assert mod.runs == [1]  # executed once


def test_an_already_imported_module_is_returned_as_it_is() -> None:
    import json

    assert _lazy("json") is json


def test_it_costs_a_cold_command_no_importlib_machinery() -> None:
    """`importlib.abc` pulls in importlib.resources, tempfile and random: ~12 ms of a cold
    `memoryd search` that only needed the loader's type."""
    import subprocess

    probe = (
        "import sys, memoryd.lazy, memoryd.cli\n"
        "print(sorted(m for m in ('importlib.abc', 'importlib.resources') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
