"""Building engines from a resolved agent: the one place that knows both config and engine classes."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from .. import paths
from ..config import ResolvedAgent
from ..errors import MemorydError
from ..fsio import private_dir, read_private

if TYPE_CHECKING:  # imported where used: a builtin agent never loads the qmd adapter
    from ..builtin_index import MemoryIndex
    from ..qmd_adapter import QmdManager

log = logging.getLogger("memoryd")


def builtin_engine(agent: ResolvedAgent, *, one_off: bool = False) -> MemoryIndex:
    """The agent's built-in index (a pre-0.2 one of this workspace migrated first); see `one_off`
    in `MemoryService`."""
    from ..builtin_index import MemoryIndex
    from ..embeddings.selection import select_provider

    # cheap: builds no client, loads no model
    selection = select_provider(agent.memory_search, agent.models, one_off=one_off)
    migrate_legacy_state(agent)
    return MemoryIndex(agent.index_settings(), selection, one_off=one_off)


def qmd_engine(agent: ResolvedAgent) -> QmdManager:
    """The agent's qmd sidecar manager (migrating a pre-0.2 qmd home of this workspace first)."""
    from ..qmd_adapter import QmdManager

    migrate_legacy_state(agent)
    return QmdManager(agent.qmd_settings())


# --------------------------------------------------------------------------- legacy layout


def migrate_legacy_state(agent: ResolvedAgent) -> list[str]:
    """Move memoryd ≤ 0.1's per-agent state here when all of it is this workspace's (never
    deleting anything); what was done."""
    done: list[str] = []
    state = agent.state
    if not agent.memory_search.store.path:
        legacy = paths.legacy_index_path(agent.agent_id)
        if legacy.exists() and not state.index_db.exists():
            if _index_belongs_to(legacy, agent.workspace):
                private_dir(state.root)
                for suffix in ("", "-wal", "-shm"):
                    src = Path(f"{legacy}{suffix}")
                    if src.exists():
                        os.replace(src, f"{state.index_db}{suffix}")
                done.append(f"moved index {legacy} → {state.index_db}")
            else:
                done.append(f"left {legacy} in place: it indexes another workspace")
    old_dir = paths.agent_root(agent.agent_id)
    old_qmd = old_dir / "qmd"
    if old_qmd.is_dir() and not state.qmd_home.exists() and _qmd_home_belongs_to(old_qmd, agent):
        private_dir(state.root)
        os.replace(old_qmd, state.qmd_home)
        done.append(f"moved qmd home {old_qmd} → {state.qmd_home}")
    old_flush = old_dir / "sessions.json"
    if old_flush.is_file() and not state.flush_state.exists():
        private_dir(state.root)
        with contextlib.suppress(OSError):
            shutil.copy2(old_flush, state.flush_state)
            os.chmod(state.flush_state, 0o600)
            done.append(f"copied {old_flush} → {state.flush_state}")
    for line in done:
        log.warning("state layout migration (agent %s): %s", agent.agent_id, line)
    return done


def _index_belongs_to(db: Path, workspace: Path) -> bool:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = conn.execute("select abs_path from files where source = 'memory'").fetchall()
        finally:
            conn.close()
    except sqlite3.Error:
        return False
    ws = str(workspace).rstrip(os.sep) + os.sep
    return all(str(r[0]).startswith(ws) for r in rows)


def _qmd_home_belongs_to(home: Path, agent: ResolvedAgent) -> bool:
    """The old home's collections point at this workspace (its index.yml names our folder)."""
    index_yml = home / "xdg-config" / "qmd" / "index.yml"
    try:
        text = (read_private(index_yml) or b"").decode("utf-8", "replace")
    except MemorydError:
        return False
    ws = str(agent.workspace)
    return json.dumps(ws) in text or f"path: {ws}\n" in text or f"{ws}/memory" in text
