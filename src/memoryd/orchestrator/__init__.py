"""The orchestrator: one MemoryService in front of qmd and the built-in index."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .service import MemoryService

if TYPE_CHECKING:
    from .status import MemoryStatus

__all__ = ["MemoryService", "MemoryStatus"]


def __getattr__(name: str) -> Any:
    # only a process that reports status defines the status models
    if name == "MemoryStatus":
        from .status import MemoryStatus

        return MemoryStatus
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
