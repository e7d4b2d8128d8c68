"""The built-in index: memoryd's default hybrid search (no qmd, no key, no network) and the
failover target when the qmd sidecar fails."""

from __future__ import annotations

from ..core.engine import IndexCheck
from .index import MemoryIndex, SyncReport

__all__ = ["IndexCheck", "MemoryIndex", "SyncReport"]
