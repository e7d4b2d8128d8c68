"""The built-in index: memoryd's default hybrid search (no qmd, no key, no network) and the
failover target when the qmd sidecar fails."""

from .index import MemoryIndex

__all__ = ["MemoryIndex"]
