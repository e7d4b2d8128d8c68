"""Pure collection planning: which qmd collections an agent needs, and how to get there."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..config import QmdConfig
from ..core.layout import MemoryRoot
from ..core.results import Source

_BAD_CHARS = re.compile(r"[^a-z0-9-]")


def sanitize_name(raw: str) -> str:
    """Collection-name safe form: lower-case, every char outside `[a-z0-9-]` becomes `-`."""
    return _BAD_CHARS.sub("-", raw.lower())


@dataclass(frozen=True, slots=True)
class CollectionSpec:
    """A collection memoryd wants: name, absolute root, glob mask, and which source it feeds."""

    name: str
    path: str
    pattern: str
    source: Source = "memory"
    legacy_name: str | None = None

    def matches(self, info: CollectionSpec) -> bool:
        """Whether qmd's collection `info` is this one (its name aside)."""
        return _same_path(self.path, info.path) and self.pattern == info.pattern


def _same_path(a: str, b: str) -> bool:
    return os.path.normpath(a) == os.path.normpath(b)


def desired_collections(
    qmd: QmdConfig,
    *,
    agent_id: str,
    workspace: Path,
    sessions_dir: Path,
    extra_roots: Sequence[MemoryRoot] = (),
) -> list[CollectionSpec]:
    """The collections one agent needs, in search order (default memory, custom paths, sessions)."""
    suffix = sanitize_name(agent_id)
    specs: list[CollectionSpec] = []
    if qmd.include_default_memory:
        ws = str(workspace)
        specs += [
            CollectionSpec(f"memory-root-{suffix}", ws, "MEMORY.md", legacy_name="memory-root"),
            CollectionSpec(f"memory-alt-{suffix}", ws, "memory.md", legacy_name="memory-alt"),
            CollectionSpec(f"memory-user-{suffix}", ws, "USER.md"),
            CollectionSpec(
                f"memory-dir-{suffix}",
                str(workspace / "memory"),
                "**/*.md",
                legacy_name="memory-dir",
            ),
        ]
    taken = {s.name for s in specs}
    for entry in qmd.paths:
        root = Path(entry.path).expanduser()
        if not root.is_absolute():
            root = workspace / root
        root_str = os.path.normpath(str(root))
        base = sanitize_name(entry.name) if entry.name else _derived_name(root_str)
        name = _unique(base, suffix, taken)
        specs.append(CollectionSpec(name, root_str, entry.pattern, legacy_name=base))
    for extra in extra_roots:
        extra_path = os.path.normpath(extra.path)
        if any(_same_path(s.path, extra_path) and s.pattern == extra.pattern for s in specs):
            continue
        base = _derived_name(extra_path, "" if extra.pattern == "**/*.md" else extra.pattern)
        specs.append(CollectionSpec(_unique(base, suffix, taken), extra_path, extra.pattern))
    if qmd.sessions.enabled:
        sessions = str(sessions_dir)
        specs.append(
            CollectionSpec(f"sessions-{suffix}", sessions, "**/*.md", "sessions", "sessions")
        )
    return specs


def _unique(base: str, suffix: str, taken: set[str]) -> str:
    """`<base>-<agent>`, or `<base>-<n>-<agent>` when that is taken; recorded in `taken`."""
    name = f"{base}-{suffix}"
    n = 2
    while name in taken:
        name = f"{base}-{n}-{suffix}"
        n += 1
    taken.add(name)
    return name


def _derived_name(root: str, salt: str = "") -> str:
    # Stable across restarts and distinct for two folders with the same basename.
    digest = hashlib.sha1((root + ("|" + salt if salt else "")).encode()).hexdigest()[:6]
    base = sanitize_name(os.path.basename(root.rstrip("/")) or "root").strip("-") or "root"
    return f"custom-{base}-{digest}"


def plan_collections(
    desired: Iterable[CollectionSpec], existing: Mapping[str, CollectionSpec]
) -> tuple[list[str], list[CollectionSpec]]:
    """The collections to remove, then those to add, that make qmd's match `desired` (a changed
    one is removed and added again)."""
    removes: list[str] = []
    adds: list[CollectionSpec] = []
    for spec in desired:
        legacy = existing.get(spec.legacy_name) if spec.legacy_name else None
        if legacy is not None and spec.legacy_name != spec.name and spec.matches(legacy):
            removes.append(legacy.name)
        current = existing.get(spec.name)
        if current is not None and not spec.matches(current):
            removes.append(spec.name)
        if current is None or not spec.matches(current):
            adds.append(spec)
    return removes, adds
