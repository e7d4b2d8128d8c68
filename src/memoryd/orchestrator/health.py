"""Per-(agent, workspace) health in `health.json`, so every process tells the same truth;
a damaged file counts as absent."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import StateError
from ..fsio import private_dir, read_private, write_private_atomic
from .failover import FailoverState, from_known_fields

VERSION = 1

#: Reasons a qmd hit was dropped that mean qmd indexed what memoryd's rules refuse (a stale or
#: vanished hit is only an edit qmd has not indexed yet).
REFUSED_HITS = frozenset(
    {"unknown_collection", "absolute_path", "traversal", "not_memory", "refused", "unresolvable"}
)


@dataclass(slots=True)
class QmdHealth:
    version: str | None = None
    version_error: str | None = None
    last_update_at: float | None = None
    last_update_ok: bool | None = None
    last_update_error: str | None = None
    last_embed_at: float | None = None
    last_embed_ok: bool | None = None
    last_embed_error: str | None = None
    #: qmd hits memoryd refused to serve, by reason, and the last one (see `QmdStatus`)
    dropped_hits: dict[str, int] = field(default_factory=dict)
    last_dropped: str | None = None
    #: when qmd last returned a hit memoryd's rules refuse (`REFUSED_HITS`)
    last_refused_at: float | None = None

    @classmethod
    def from_json(cls, raw: Any) -> QmdHealth:
        health = from_known_fields(cls, raw) or cls()
        dropped = health.dropped_hits
        if not isinstance(dropped, dict) or not all(
            isinstance(k, str) and isinstance(v, int) for k, v in dropped.items()
        ):
            health.dropped_hits = {}
        return health


@dataclass(slots=True)
class Health:
    """What `health.json` holds; `updated_at`/`pid` say who wrote it last and when."""

    requested: str = "builtin"
    failover: FailoverState = field(default_factory=FailoverState)
    qmd: QmdHealth = field(default_factory=QmdHealth)
    updated_at: float | None = None
    pid: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "version": VERSION,
            "requested": self.requested,
            "failover": asdict(self.failover),
            "qmd": asdict(self.qmd),
            "updatedAt": self.updated_at,
            "pid": self.pid,
        }

    @classmethod
    def from_json(cls, raw: Any) -> Health | None:
        if not isinstance(raw, dict) or raw.get("version") != VERSION:
            return None
        failover = FailoverState.from_json(raw.get("failover"))
        if failover is None:
            return None
        updated = raw.get("updatedAt")
        pid = raw.get("pid")
        return cls(
            requested=str(raw.get("requested") or "builtin"),
            failover=failover,
            qmd=QmdHealth.from_json(raw.get("qmd")),
            updated_at=float(updated) if isinstance(updated, int | float) else None,
            pid=pid if isinstance(pid, int) else None,
        )


class HealthFile:
    """Reads and writes one `health.json`; a read-only state dir only loses the write."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> Health | None:
        data = read_private(self.path)  # a link planted here is refused (StateError)
        try:
            raw = json.loads(data) if data is not None else None
        except ValueError:
            return None
        return Health.from_json(raw)

    def save(self, health: Health) -> None:
        health.updated_at = time.time()
        health.pid = os.getpid()
        data = (json.dumps(health.to_json(), indent=2, sort_keys=True) + "\n").encode()
        with contextlib.suppress(StateError):
            private_dir(self.path.parent)
            write_private_atomic(self.path, data)
