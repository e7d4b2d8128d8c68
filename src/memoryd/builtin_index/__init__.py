"""The built-in index: SQLite FTS5 + sqlite-vec hybrid search over an agent's memory files.

It is memoryd's embedded default (no qmd, no API key, no network) and the failover target
when the qmd sidecar fails.
"""

from __future__ import annotations

from ..core.engine import IndexCheck
from .index import MemoryIndex, SyncReport

__all__ = ["IndexCheck", "MemoryIndex", "SyncReport"]
