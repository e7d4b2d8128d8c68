"""The engine contract: ranked, snippet-capped results from the built-in index or the qmd sidecar;
scope, citations and the injected-characters budget are the orchestrator's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from ..errors import InvalidInput
from .layout import MemoryRoot
from .results import SearchResult
from .text import camel_case

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from ..background import Background
    from .status import BuiltinStatus, QmdStatus

EngineName = Literal["builtin", "qmd"]
#: Longest query accepted (characters), on every surface; longer ones are `invalid_input`.
MAX_QUERY_CHARS = 2000
Corpus = Literal["memory", "sessions", "all"]
ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """One search: the query and the caller's limits (None: the configured default); `wait_s` is
    how long the built-in index may first catch up."""

    query: str
    max_results: int | None = None
    min_score: float | None = None
    corpus: Corpus = "all"
    wait_s: float | None = None
    #: Each result carries how its score and place were computed (`SearchResult.explain`).
    explain: bool = False


@dataclass(frozen=True, slots=True)
class SearchOutput:
    """A search's answer: engines fill the first fields, each layer above adds its own with `replace`."""

    results: list[SearchResult]
    engine: EngineName | None = None
    provider: str | None = None
    model: str | None = None
    mode: str | None = None
    #: The engine's `maxInjectedChars`: the orchestrator trims the decorated results to it.
    max_injected_chars: int | None = None
    notes: list[str] = field(default_factory=list)
    #: Why the engine answered in a degraded way (e.g. embeddings failed → keyword only).
    degraded: dict[str, Any] | None = None
    #: How far the engine's index lags the newest memory file (seconds), when it does.
    stale_seconds: float | None = None
    #: Set by the supervisor when the built-in index answered for a failed qmd.
    fallback: dict[str, Any] | None = None
    #: Set by the service when scope rules deny the session (the reason).
    scope_denied: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The `memory_search` tool's JSON shape."""
        if self.scope_denied is not None:
            return {"results": [], "scopeDenied": True, "reason": self.scope_denied}
        out: dict[str, Any] = {
            "results": [r.to_dict() for r in self.results],
            "backend": self.engine,
            "provider": self.provider,
            "model": self.model,
            "mode": self.mode,
            "fallback": self.fallback,
            "citations": any(r.citation for r in self.results),
            "notes": self.notes,
        }
        if self.stale_seconds is not None:
            out["stale"] = True
            out["staleSeconds"] = round(self.stale_seconds, 1)
        return out


@dataclass(frozen=True, slots=True)
class IndexCheck:
    """What `MemoryIndex.check` found (`problem`), where it moved a damaged file and whether it rebuilt."""

    ok: bool
    problem: str | None = None
    moved_to: str | None = None
    rebuilt: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        out = {camel_case(name): getattr(self, name) for name in self.__slots__}
        return {**out, "seconds": round(self.seconds, 3)}


class MemoryEngine(Protocol):
    """The built-in index and the qmd manager, as the orchestrator sees them."""

    def start(self, background: Background | None = None) -> None:
        """Prepare (open, create collections); with `background`, run timers/watchers on it."""

    def search(self, request: SearchRequest) -> SearchOutput:
        """Ranked results; raises a `MemorydError` subclass on failure, never returns garbage."""

    def notify_changed(self) -> None:
        """A memory file changed through memoryd: refresh soon (debounced)."""

    def close(self) -> None:
        """Stop timers and release files and processes."""


class BuiltinEngine(MemoryEngine, Protocol):
    """The built-in index's side of the contract."""

    def sync(self, *, force: bool = False, progress: ProgressFn | None = None) -> Any:
        """Bring the index up to date with the files now."""

    def status(self) -> BuiltinStatus: ...

    def pending_changes(self) -> int:
        """Memory files added, changed or removed since the last sync."""

    def check(self) -> IndexCheck:
        """Verify the index file; a damaged one is moved aside and rebuilt."""

    def purge(self, paths: Sequence[str], *, progress: ProgressFn | None = None) -> Any:
        """Drop `paths` from the index now (after `memoryd forget`)."""

    def reset(self) -> list[str]:
        """Empty the index in place; the paths removed."""


class QmdEngine(MemoryEngine, Protocol):
    """The qmd sidecar's side of the contract."""

    def sync(self) -> None:
        """`qmd update`, then `qmd embed` when due."""

    def status(self) -> QmdStatus: ...

    def roots(self) -> list[MemoryRoot]:
        """Every collection as a memory root (what `memory_get` serves)."""

    def probe(self) -> None:
        """Check that qmd starts and answers `qmd X.Y.Z`; a `QmdError` says why not."""

    def reset(self) -> list[str]:
        """Wipe what qmd derived and make its home again; the paths removed."""

    def bounded(self, deadline: float | None) -> AbstractContextManager[None]:
        """Within, every qmd call of this thread ends by `deadline` (`time.monotonic()`)."""


def check_search_input(query: object, max_results: object, min_score: object) -> str:
    """The stripped query, or `InvalidInput` for an empty/overlong query or out-of-range limits."""
    if not isinstance(query, str):
        raise InvalidInput("query must be a string")
    text = query.strip()
    if not text:
        raise InvalidInput("query must not be empty")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"query is {len(text)} characters; at most {MAX_QUERY_CHARS} are accepted"
        )
    if not _within(max_results, (int,), 1, 100):
        raise InvalidInput("maxResults must be an integer from 1 to 100")
    if not _within(min_score, (int, float), 0, 1):
        raise InvalidInput("minScore must be a number from 0 to 1")
    return text


def _within(value: object, kind: tuple[type[float], ...], lo: int, hi: int) -> bool:
    """None (the default), or a `kind` (never a bool) from `lo` to `hi`."""
    if value is None:
        return True
    return isinstance(value, kind) and not isinstance(value, bool) and lo <= value <= hi
