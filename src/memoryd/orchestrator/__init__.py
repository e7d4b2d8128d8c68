"""The orchestrator: one MemoryService in front of qmd and the built-in index."""

from __future__ import annotations

from .service import MemoryService

__all__ = ["MemoryService"]
