"""What the SQLite and PostgreSQL stores share: their records and the checks that read alike."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class VectorEngine:
    engine: str  # "sqlite-vec" | "numpy" | "pgvector" | "disabled"
    available: bool
    load_error: str | None = None
    binding: str = "sqlite3"


@dataclass(frozen=True, slots=True)
class Recovery:
    """A damaged index file moved aside (`moved_to` is None when another process already had)."""

    moved_to: Path | None
    reason: str | None
    at: float | None


@dataclass(frozen=True, slots=True)
class ChunkRow:
    id: int
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    mtime: float | None


#: `on_recovered(recovery, refill_now)`, called when a fresh file replaced a damaged one: with
#: `refill_now` the owner may rebuild the contents at once, and returns whether it did.
RecoveryHook = Callable[[Recovery, bool], bool]


class StoreChecks:
    """The stores' checks that only differ by how they read their metadata."""

    #: The signature (provider, model, chunking) this process writes with, so that it writes
    #: nothing into an index another process rebuilt with other settings.
    guard_signature: dict[str, Any] | None = None
    fts_error: str | None = None

    def meta_value(self, key: str) -> str | None:
        raise NotImplementedError

    @property
    def fts_available(self) -> bool:
        return self.fts_error is None

    def signature_matches(self) -> bool:
        """Whether the index was built with `guard_signature` (or records none yet)."""
        raw = None if self.guard_signature is None else self.meta_value("signature")
        if raw is None:
            return True
        try:
            return bool(json.loads(raw) == self.guard_signature)
        except ValueError:
            return False
