"""memoryd: durable, searchable memory for AI agents.

from memoryd import MemoryService, load_config

with MemoryService(load_config(), workspace="~/agent") as memory:
    answer = memory.search("when does the old webhook secret stop working?")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import (
    ConfigError,
    MemorydError,
    PathNotAllowed,
    QmdBadOutput,
    QmdTimeout,
    QmdUnavailable,
)

if TYPE_CHECKING:
    from .config_files import load_config
    from .core.engine import SearchOutput
    from .core.results import SearchResult
    from .orchestrator.service import MemoryService

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "MemoryService",
    "MemorydError",
    "PathNotAllowed",
    "QmdBadOutput",
    "QmdTimeout",
    "QmdUnavailable",
    "SearchOutput",
    "SearchResult",
    "__version__",
    "load_config",
]


#: Loaded on first use: the `memoryd` command imports this package for its version, and a
#: search it forwards to `memoryd serve` never loads the config or the service.
_LAZY = {
    "load_config": "config_files",
    "SearchResult": "core.results",
    "SearchOutput": "core.engine",
    "MemoryService": "orchestrator.service",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
