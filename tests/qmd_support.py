"""Shared helpers for the qmd tests: find the real qmd, build agents and managers, fault wrappers.

Integration tests take the `qmd_bin` fixture (from `qmd_fixtures`, imported by each test module):
it skips with a clear reason when qmd is truly absent, and fails instead when `CI` is set, because
in CI qmd must run.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from memoryd.background import Background
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.core.results import FileText
from memoryd.core.status import CollectionStatus
from memoryd.memfiles import read_memory_file
from memoryd.orchestrator import MemoryService
from memoryd.qmd_adapter import QmdManager

REPO = Path(__file__).resolve().parents[1]
GGUF = Path(
    os.environ.get("MEMORYD_TEST_GGUF")
    or REPO.parent / "shared" / "models" / "minilm-l6-v2-f16.gguf"
)

# Models qmd cannot have offline point at files that do not exist, so qmd fails in seconds
# instead of retrying a hub download for minutes.
MISSING_MODEL = "/nonexistent/memoryd-test/no-such-model.gguf"
OFFLINE_MODELS = {"embed": str(GGUF), "generate": MISSING_MODEL, "rerank": MISSING_MODEL}

# qmd refuses every model call when CI is set; tests that embed run it without CI.
NO_CI: Mapping[str, str | None] = {"CI": None}


def _candidates() -> list[tuple[str, str]]:
    out = []
    if os.environ.get("MEMORYD_TEST_QMD"):
        out.append(("MEMORYD_TEST_QMD", os.environ["MEMORYD_TEST_QMD"]))
    out.append((".tools/qmd/bin/qmd", str(REPO / ".tools" / "qmd" / "bin" / "qmd")))
    on_path = shutil.which("qmd")
    if on_path:
        out.append(("qmd on PATH", on_path))
    return out


@cache
def find_qmd() -> tuple[str | None, str]:
    """(path of a qmd that answers `--version`, or None; what was tried)."""
    tried = []
    for label, path in _candidates():
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            tried.append(f"{label}={path} (missing)")
            continue
        try:
            proc = subprocess.run(
                [path, "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                cwd="/",
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            tried.append(f"{label}={path} ({err})")
            continue
        if proc.returncode == 0 and "qmd" in proc.stdout.lower():
            return path, ""
        tried.append(f"{label}={path} (rc {proc.returncode}: {proc.stderr.strip()[-200:]})")
    return None, "; ".join(tried)


def require_qmd() -> str:
    """The qmd path, or skip (fail under CI) with what was tried."""
    path, tried = find_qmd()
    if path is None:
        reason = f"qmd is not installed (run scripts/install-qmd); tried: {tried}"
        if os.environ.get("CI"):
            pytest.fail(f"CI requires qmd: {reason}", pytrace=False)
        pytest.skip(reason)
    return path


def require_gguf() -> Path:
    if not GGUF.is_file():
        msg = f"embedding model {GGUF} is missing (set MEMORYD_TEST_GGUF)"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return GGUF


def make_agent(workspace: Path, agent_id: str = "main", **qmd: Any) -> ResolvedAgent:
    """A qmd-backed agent on `workspace` with `memory.qmd` overrides (camelCase or snake_case)."""
    config = validate_config({"memory": {"backend": "qmd", "qmd": qmd}})
    return resolve_agent(config, agent_id, workspace=workspace)


def make_manager(
    agent: ResolvedAgent, qmd: str, home: Path, *, env: Mapping[str, str | None] = NO_CI, **kw: Any
) -> QmdManager:
    return QmdManager(
        agent.qmd_settings(),
        command=qmd,
        home=home,
        shared_models_dir=None,
        env_overrides=env,
        **kw,
    )


def collections_of(mgr: QmdManager) -> dict[str, CollectionStatus]:
    """The manager's collections by name, as its status reports them."""
    return {c.name: c for c in mgr.status().collections}


def memory_get(
    mgr: QmdManager, path: str, from_line: int | None = None, lines: int | None = None
) -> FileText:
    """`memory_get` on a qmd-backed agent: the supervisor reads by the manager's roots."""
    return read_memory_file(mgr.roots(), mgr.settings.workspace, path, from_line, lines)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def seed_workspace(ws: Path) -> Path:
    """A small memory: MEMORY.md and three daily notes with distinctive words."""
    write(ws / "MEMORY.md", "# Memory\n\nAlice likes green tea.\nBob prefers espresso.\n")
    write(
        ws / "memory" / "2026-01-02.md",
        "# 2026-01-02\n\nMet with Alice about the roadmap.\nDecided to ship memoryd in March.\n",
    )
    write(
        ws / "memory" / "2026-01-03.md",
        "# 2026-01-03\n\nThe zeppelin launch slipped to April.\nCarol owns the zeppelin budget.\n",
    )
    write(ws / "memory" / "projects" / "garden.md", "# Garden\n\nPlant tomatoes after the frost.\n")
    return ws


def fault_wrapper(path: Path, qmd: str, body: str) -> str:
    """An executable shell script in front of the real qmd (`$REAL` inside `body`) to inject faults."""
    path.write_text(f'#!/bin/sh\nREAL="{qmd}"\n{body}\n', encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(path)


class QmdRig:
    """A seeded workspace and a MemoryService on qmd `command`, failing over after one failure.

    `qmd_cfg` replaces whole `memory.qmd` keys (`limits`, `update`, …) of these defaults.
    """

    def __init__(self, tmp_path: Path, command: str, **qmd_cfg: Any) -> None:
        self.ws = seed_workspace(tmp_path / "ws")
        self.home = tmp_path / "qmd-home"
        qmd: dict[str, Any] = {
            "command": command,
            "limits": {"timeoutMs": 4000},
            "update": {"onBoot": False, "interval": 0},
            "failover": {"failureThreshold": 1, "cooldownMs": 200, "probeMaxIntervalMs": 1000},
            **qmd_cfg,
        }
        self.config = validate_config(
            {
                "memory": {"backend": "qmd", "qmd": qmd},
                "agents": {
                    "defaults": {"workspace": str(self.ws), "memorySearch": {"provider": "none"}}
                },
            }
        )

    def factory(self, agent: ResolvedAgent) -> QmdManager:
        return QmdManager(agent.qmd_settings(), home=self.home, shared_models_dir=None)

    def service(self) -> MemoryService:
        return MemoryService(self.config, qmd_factory=self.factory)


def top_path(out: dict[str, Any]) -> str:
    """The path of a search answer's first result (there must be one)."""
    assert out["results"], out
    return str(out["results"][0]["path"])


def start_service(svc: MemoryService, bg: Background) -> None:
    """`svc.start(bg)`, then wait for qmd's start-up, which runs in the background (a search
    would wait for it only up to its own timeout)."""
    svc.start(bg)
    svc.backend().ensure_qmd_started()


def wait_for_backend(svc: MemoryService, backend: str, timeout: float = 20) -> dict[str, Any]:
    """Poll `status()` until `backend` serves; its status then."""
    until = time.monotonic() + timeout
    while True:
        st = svc.status()
        if st["backend"] == backend:
            return st
        assert time.monotonic() < until, f"{backend} did not serve within {timeout:g}s: {st}"
        time.sleep(0.1)
