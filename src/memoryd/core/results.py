"""Plain result types shared by both backends, the orchestrator and the agent tools."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

Source = Literal["memory", "sessions"]

MAX_SNIPPET_CHARS = 700


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One recalled chunk: where it is (workspace-relative path, 1-based inclusive lines) and what it says."""

    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: Source = "memory"
    citation: str | None = None

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
        return out


@dataclass(frozen=True, slots=True)
class FileText:
    """What `memory_get` returns: the (sliced) text of one memory file."""

    path: str
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "text": self.text}
