"""The built-in index: SQLite FTS5 + sqlite-vec hybrid search over an agent's memory files.

It is memoryd's embedded default (no qmd, no API key, no network) and the failover target
when the qmd sidecar fails.
"""

from __future__ import annotations

from ..core.chunking import Chunk, chunk_lines
from ..core.ranking import Candidate, RankParams, decay_multiplier, rank
from ._files import MemoryFile, discover, read_memory_file, resolve_get_path
from .index import MemoryIndex, SearchOutcome, SyncReport

__all__ = [
    "Candidate",
    "Chunk",
    "MemoryFile",
    "MemoryIndex",
    "RankParams",
    "SearchOutcome",
    "SyncReport",
    "chunk_lines",
    "decay_multiplier",
    "discover",
    "rank",
    "read_memory_file",
    "resolve_get_path",
]
