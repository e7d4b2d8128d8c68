"""Run the same questions through memoryd on the real qmd: `memory_search` with `backend = "qmd"`.

`qmd-search` is memoryd's default qmd settings (`searchMode = "search"`: the planned keyword
`qmd query`, no model); `qmd-query` is `searchMode = "query"` with the shared all-MiniLM GGUF as
qmd's embed model (the only one available offline), which adds a `vec:` line once qmd has
embedded the collections. Questions go through `MemoryService.memory_search`, failover included,
so the share of answers that came from qmd (`backend: "qmd"`) is measured too. Each workspace
gets its own isolated qmd home under `<out>/qmd/`, reused across runs, and memoryd's state (the
fallback index, health) under `<out>/qmd-state/`.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from memoryd.config import ResolvedAgent, validate_config
from memoryd.core.engine import MAX_QUERY_CHARS
from memoryd.orchestrator import MemoryService
from memoryd.qmd_adapter import QmdManager

ROOT = Path(__file__).resolve().parents[2]


def qmd_command() -> str:
    for candidate in (os.environ.get("MEMORYD_QMD"), str(ROOT / ".tools" / "qmd" / "bin" / "qmd")):
        if candidate and Path(candidate).exists():
            return candidate
    raise SystemExit("qmd is not installed: run scripts/install-qmd (or set MEMORYD_QMD)")


def embed_model(data_dir: Path) -> Path:
    path = (data_dir.parent / "models" / "minilm-l6-v2-f16.gguf").resolve()
    if not path.is_file():
        raise SystemExit(f"qmd-query needs the GGUF embedding model at {path}")
    return path


class QmdSystem:
    """One workspace's memoryd over qmd in `mode`; `search` asks it as an agent would."""

    def __init__(self, workspace: Path, home: Path, state: Path, mode: str, model: Path) -> None:
        self.workspace, self.home, self.mode = workspace, home, mode
        qmd: dict[str, Any] = {
            "command": qmd_command(),
            "searchMode": mode,
            # timers off: the bench updates (and embeds) once, before the questions
            "update": {"onBoot": False, "interval": 0, "embedTimeoutMs": 7_200_000},
        }
        if mode != "search":
            qmd["models"] = {"embed": str(model)}
        config = validate_config(
            {
                "memory": {"backend": "qmd", "citations": "off", "qmd": qmd},
                "agents": {
                    "defaults": {
                        "workspace": str(workspace),
                        # the fallback index: keyword-only, so a failover costs no embedding
                        "memorySearch": {
                            "provider": "none",
                            "store": {"path": str(state / f"{workspace.name}-fallback.sqlite")},
                            "sync": {"watch": False},
                        },
                    }
                },
            }
        )
        os.environ.setdefault("MEMORYD_STATE_DIR", str(state))
        self.service = MemoryService(config, qmd_factory=self._manager)
        self.prepared = False
        self.answers = 0
        self.from_qmd = 0
        self.failures: list[str] = []

    def _manager(self, agent: ResolvedAgent) -> QmdManager:
        return QmdManager(
            agent.qmd_settings(),
            home=self.home,
            shared_models_dir=None,
            env_overrides={"CI": None},  # qmd refuses model calls when CI is set
        )

    @property
    def qmd(self) -> QmdManager:
        mgr = self.service.backend().qmd
        assert isinstance(mgr, QmdManager)
        return mgr

    def prepare(self) -> None:
        if self.prepared:
            return
        self.service.backend().ensure_qmd_started()
        self.qmd.update()
        if self.mode != "search" and not self.qmd.has_vectors(
            [c.name for c in self.qmd.known_collections()]
        ):
            started = time.perf_counter()
            print(f"  [qmd {self.workspace.name}] embedding (MiniLM GGUF)…", file=sys.stderr)
            self.qmd.embed()
            took = time.perf_counter() - started
            print(f"  [qmd {self.workspace.name}] embedded in {took:.0f}s", file=sys.stderr)
        self.prepared = True

    def search(self, query: str) -> list[dict[str, Any]]:
        """One `memory_search` as the agent makes it (top 6, ≤ 4000 characters)."""
        self.prepare()
        # the tools accept at most MAX_QUERY_CHARS (one CISI query is longer)
        out = self.service.memory_search(query[:MAX_QUERY_CHARS])
        self.answers += 1
        if out.get("backend") == "qmd":
            self.from_qmd += 1
        elif out.get("fallback") or out.get("disabled"):
            reason = (out.get("fallback") or {}).get("reason") or out.get("error")
            self.failures.append(str(reason))
        return [_row(r) for r in out.get("results", [])]

    def ranking(self, query: str, max_results: int = 100) -> list[dict[str, Any]]:
        """qmd's ranking without the agent's budget (collections: nDCG, recall@100)."""
        self.prepare()
        hits = self.qmd.search(
            query[:MAX_QUERY_CHARS], max_results=max_results, min_score=0.0
        ).results
        return [_row(r.to_dict()) for r in hits]

    def close(self) -> None:
        if self.failures:
            print(
                f"  [qmd {self.workspace.name}] {len(self.failures)} answers from the fallback; "
                f"first: {self.failures[0]}",
                file=sys.stderr,
            )
        self.service.close()


def _row(r: dict[str, Any]) -> dict[str, Any]:
    return {
        "path": r["path"],
        "startLine": r["startLine"],
        "endLine": r["endLine"],
        "snippet": r["snippet"],
        "score": round(float(r["score"]), 4),
    }
