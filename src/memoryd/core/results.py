"""Plain result types shared by both backends, the orchestrator and the agent tools."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

Source = Literal["memory", "sessions"]

MAX_SNIPPET_CHARS = 700


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One recalled chunk: workspace-relative path, 1-based inclusive lines, score and snippet."""

    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: Source = "memory"
    citation: str | None = None
    #: Set on hits another engine added to an answer (`memory.qmd.emptyResults = "builtin"`).
    engine: str | None = None
    #: How the score and place were computed (`--explain`); not compared, so equality ignores it.
    explain: dict[str, Any] | None = field(default=None, compare=False)

    def with_(self, **changes: Any) -> SearchResult:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The agent-facing JSON shape (camelCase, `citation` only when set)."""
        out: dict[str, Any] = {
            "path": self.path,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "source": self.source,
        }
        if self.citation is not None:
            out["citation"] = self.citation
        if self.engine is not None:
            out["backend"] = self.engine
        if self.explain is not None:
            out["explain"] = self.explain
        return out


@dataclass(frozen=True, slots=True)
class FileText:
    """What `memory_get` returns: one file's capped text, `next_from` to page on when `truncated`."""

    path: str
    text: str
    truncated: bool = False
    next_from: int | None = None
    missing: bool = False
    past_end: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "text": self.text}
        if self.truncated:
            out["truncated"] = True
            out["nextFrom"] = self.next_from
        if self.missing:
            out["missing"] = True
        if self.past_end:
            out["pastEnd"] = True
        return out
