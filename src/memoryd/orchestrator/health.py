"""Per-(agent, workspace) health in `health.json`, so every process tells the same truth;
a damaged file counts as absent."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

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


@dataclass(slots=True)
class Health:
    """What `health.json` holds; `updated_at`/`pid` say who wrote it last and when."""

    requested: str = "builtin"
    failover: FailoverState = field(default_factory=FailoverState)
    qmd: QmdHealth = field(default_factory=QmdHealth)
    updated_at: float | None = None
    pid: int | None = None


def load_health(path: Path) -> Health | None:
    """The health `path` holds; None when it is missing, damaged or of another version."""
    data = read_private(path)  # a link planted here is refused (StateError)
    try:
        raw = json.loads(data) if data is not None else None
    except ValueError:
        return None
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        return None
    failover = from_known_fields(FailoverState, raw.get("failover"))
    if failover is None or failover.active not in ("qmd", "builtin"):
        return None
    qmd = from_known_fields(QmdHealth, raw.get("qmd")) or QmdHealth()
    if not isinstance(qmd.dropped_hits, dict) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in qmd.dropped_hits.items()
    ):
        qmd.dropped_hits = {}
    updated, pid = raw.get("updatedAt"), raw.get("pid")
    return Health(
        requested=str(raw.get("requested") or "builtin"),
        failover=failover,
        qmd=qmd,
        updated_at=float(updated) if isinstance(updated, int | float) else None,
        pid=pid if isinstance(pid, int) else None,
    )


def save_health(path: Path, health: Health) -> None:
    """Write `health` as this process's, now; a read-only state dir only loses the write."""
    health.updated_at = time.time()
    health.pid = os.getpid()
    doc = {
        "version": VERSION,
        "requested": health.requested,
        "failover": asdict(health.failover),
        "qmd": asdict(health.qmd),
        "updatedAt": health.updated_at,
        "pid": health.pid,
    }
    with contextlib.suppress(StateError):
        private_dir(path.parent)
        write_private_atomic(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
