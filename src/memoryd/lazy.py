"""numpy and anyio, loaded on first use: a keyword-only search never pays for numpy, a
one-off command run by `memoryd.inline` never pays for anyio.

Importing numpy costs 120–300 ms, more than the rest of a cold `memoryd search` on keyword-only
memory, which never touches a vector. The modules on that path (the built-in index, its store,
the embedding interface) take numpy from here. The module object is registered as
`sys.modules["numpy"]` at once and executes on the first attribute access (any later
`import numpy` elsewhere also triggers it), so there is only ever one numpy. When numpy is
already imported, it is returned as it is.

Safe across threads: the first access executes the module under a lock, and an access from
another thread meanwhile waits for it to finish. (Python 3.11's `importlib.util.LazyLoader`,
which this replaced, marks the module loaded *before* executing it, so another thread's
`from numpy import dtype` saw half a numpy and failed: a long-lived process whose first search
imports numpy while its background sync does.) The thread that executes it reads the
partly-executed module as a normal import would.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time `importlib.abc` pulls in importlib.resources, ~13 ms cold
    from importlib.abc import Loader

__all__ = ["anyio", "numpy"]


class _Pending:
    def __init__(self, loader: Loader) -> None:
        self.loader = loader
        self.lock = threading.RLock()
        self.loading = False


_pending: dict[int, _Pending] = {}


class _LazyModule(ModuleType):
    """A module not executed yet: the first attribute access executes it, once."""

    def __getattribute__(self, attr: str) -> Any:
        pending = _pending.get(id(self))
        if pending is not None:
            with pending.lock:
                if _pending.get(id(self)) is pending and not pending.loading:
                    pending.loading = True  # this thread's own reads during exec pass below
                    try:
                        pending.loader.exec_module(self)
                    except BaseException:
                        pending.loading = False
                        raise
                    self.__class__ = ModuleType  # type: ignore[assignment]
                    del _pending[id(self)]
        return ModuleType.__getattribute__(self, attr)


def _lazy(name: str) -> ModuleType:
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:  # pragma: no cover - numpy is a dependency
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    module = importlib.util.module_from_spec(spec)
    _pending[id(module)] = _Pending(spec.loader)
    module.__class__ = _LazyModule
    sys.modules[name] = module
    return module


numpy = _lazy("numpy")
#: anyio (with its submodules, which it loads on attribute access) for the modules a one-off
#: command imports: `memoryd.inline` runs their async code without touching it (~7-11 ms of
#: imports, among them inspect and ast).
anyio = _lazy("anyio")
