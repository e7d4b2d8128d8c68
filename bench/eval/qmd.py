"""Run the same questions through real qmd via memoryd's qmd adapter (`QmdManager`).

`qmd-search` is qmd's BM25 `search`; `qmd-query` is a structured `lex:`+`vec:` query with
`--no-rerank`, embedding with the shared all-MiniLM GGUF (the only model available offline).
Each workspace gets its own isolated qmd home under `<out>/qmd/`, reused across runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from memoryd.config import resolve_agent, validate_config
from memoryd.core.citations import trim_to_budget
from memoryd.errors import QmdError
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
    """One workspace's qmd home; `search` (BM25) and `query` (lex+vec, no rerank) over it."""

    def __init__(
        self,
        workspace: Path,
        home: Path,
        model: Path,
        *,
        max_results: int = 6,
        max_chars: int = 4000,
    ) -> None:
        self.workspace, self.home, self.model = workspace, home, model
        self.max_results, self.max_chars = max_results, max_chars
        self.managers: dict[str, QmdManager] = {}
        self.embedded = False
        self.errors: list[str] = []

    def _manager(self, mode: str) -> QmdManager:
        if mode not in self.managers:
            qmd = {
                "command": qmd_command(),
                "searchMode": mode,
                "models": {"embed": str(self.model)},
                "limits": {
                    "maxResults": self.max_results,
                    "maxInjectedChars": self.max_chars,
                    "timeoutMs": 120_000,
                },
                "update": {
                    "onBoot": False,
                    "updateTimeoutMs": 600_000,
                    "embedTimeoutMs": 7_200_000,
                    "interval": 0,
                },
            }
            cfg = validate_config({"memory": {"backend": "qmd", "qmd": qmd}})
            agent = resolve_agent(cfg, workspace=self.workspace)
            self.managers[mode] = QmdManager(
                agent.qmd_settings(),
                home=self.home,
                shared_models_dir=None,
                env_overrides={"CI": None},
                rerank=False,
            )
        return self.managers[mode]

    async def prepare(self, mode: str) -> None:
        m = self._manager(mode)
        if not getattr(m, "_started", False):
            await m.start()
            await m.update(force=True)
        if mode == "query" and not self.embedded:
            started = time.perf_counter()
            print(
                f"  [qmd {self.workspace.name}] embedding (MiniLM GGUF)…",
                file=sys.stderr,
                flush=True,
            )
            await m.embed(force=True)
            print(
                f"  [qmd {self.workspace.name}] embedded in {time.perf_counter() - started:.0f}s",
                file=sys.stderr,
                flush=True,
            )
            self.embedded = True

    async def search(
        self, mode: str, query: str, *, max_results: int | None = None
    ) -> list[dict[str, Any]]:
        await self.prepare(mode)
        text = query
        if mode == "query":
            flat = " ".join(query.split())
            # qmd's lex syntax reads double quotes as phrase markers and rejects unmatched ones
            lex = " ".join(query.replace('"', " ").split())
            text = f"lex: {lex}\nvec: {flat}"
        try:
            hits = await self._manager(mode).search_hits(text, max_results=max_results)
            results = trim_to_budget(hits, self.max_chars)  # memory_search's one budget trim
        except QmdError as err:  # a failed question scores as no results, and is counted
            self.errors.append(f"{mode}: {err}")
            return []
        return [
            {
                "path": r.path,
                "startLine": r.start_line,
                "endLine": r.end_line,
                "snippet": r.snippet,
                "score": round(float(r.score), 4),
            }
            for r in results
        ]

    async def aclose(self) -> None:
        if self.errors:
            print(
                f"  [qmd {self.workspace.name}] {len(self.errors)} failed queries (scored as no results); first: {self.errors[0]}",
                file=sys.stderr,
            )
        for m in self.managers.values():
            await m.aclose()
