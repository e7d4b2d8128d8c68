"""Per-(agent, workspace) failover state in `health.json`, so every process tells the same truth;
a damaged file counts as absent (qmd keeps its own state in its home)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import asdict, fields
from pathlib import Path

from ..errors import StateError
from ..fsio import private_dir, read_private, write_private_atomic
from .failover import FailoverState

VERSION = 1


def load_health(path: Path) -> tuple[FailoverState, float | None] | None:
    """The failover state `path` holds and when it was written; None when it is missing, damaged
    or of another version."""
    data = read_private(path)  # a link planted here is refused (StateError)
    if data is None:
        return None
    try:
        raw = json.loads(data)
        known = {f.name for f in fields(FailoverState)}
        failover = FailoverState(**{k: v for k, v in raw["failover"].items() if k in known})
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if raw.get("version") != VERSION or failover.active not in ("qmd", "builtin"):
        return None
    updated = raw.get("updatedAt")
    return failover, float(updated) if isinstance(updated, int | float) else None


def save_health(path: Path, failover: FailoverState) -> float:
    """Write `failover` as this process's, now (returned); a read-only state dir only loses it."""
    now = time.time()
    doc = {
        "version": VERSION,
        "requested": "qmd",
        "failover": asdict(failover),
        "updatedAt": now,
        "pid": os.getpid(),
    }
    with contextlib.suppress(StateError):
        private_dir(path.parent)
        write_private_atomic(path, (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode())
    return now
