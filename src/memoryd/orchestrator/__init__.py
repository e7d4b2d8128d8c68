"""The orchestrator: one MemoryService in front of qmd and the built-in index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .service import MemoryService
    from .status import MemoryStatus

__all__ = ["MemoryService", "MemoryStatus"]


def __getattr__(name: str) -> Any:
    # on first use: a one-off search imports `engines` first, to start its query's embedding
    # before the service's modules load (`engines.prefetch_search_query`); a process that
    # reports no status never defines the status models
    if name == "MemoryService":
        from .service import MemoryService

        return MemoryService
    if name == "MemoryStatus":
        from .status import MemoryStatus

        return MemoryStatus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
