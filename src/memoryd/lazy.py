"""numpy and anyio, loaded on first use: a keyword-only search never pays for numpy, a
one-off command run by `memoryd.inline` never pays for anyio.

Importing numpy costs 120–300 ms, more than the rest of a cold `memoryd search` on keyword-only
memory, which never touches a vector. The modules on that path (the built-in index, its store,
the embedding interface) take numpy from here. `numpy` is the stdlib `importlib.util.LazyLoader`
recipe: the module object is registered as `sys.modules["numpy"]` at once and executes on the
first attribute access (any later `import numpy` elsewhere also triggers it), so there is only
ever one numpy. When numpy is already imported, it is returned as it is.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

__all__ = ["anyio", "numpy"]


def _lazy(name: str) -> ModuleType:
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:  # pragma: no cover - numpy is a dependency
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


numpy = _lazy("numpy")
#: anyio (with its submodules, which it loads on attribute access) for the modules a one-off
#: command imports: `memoryd.inline` runs their async code without touching it (~7-11 ms of
#: imports, among them inspect and ast).
anyio = _lazy("anyio")
