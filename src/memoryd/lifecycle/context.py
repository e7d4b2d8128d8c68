"""Session-start context: the memory files an agent loads when a session begins."""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import date, timedelta
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from ..config import ResolvedAgent
from ..core.layout import (
    LONG_TERM_NAMES,
    MEMORY_DIR,
    MemoryRoot,
    daily_note_name,
    is_daily_note_of,
)
from ..core.session_keys import parse_session_key
from ..core.text import camel_case
from ..errors import MemorydError
from ..fsio import read_file, walk

_HEAD_RATIO: Final = 0.7
_TAIL_RATIO: Final = 0.2
# Below this much remaining total budget a file is left out rather than cut to a stub.
_MIN_FILE_BUDGET: Final = 64

FileKind = Literal["long-term", "daily"]


@dataclass(frozen=True, slots=True)
class ContextFile:
    """One loaded file: workspace-relative path, sizes on disk and injected, and the injected text."""

    path: str
    kind: FileKind
    raw_chars: int
    injected_chars: int
    truncated: bool
    content: str

    def to_dict(self) -> dict[str, Any]:
        return {
            camel_case(f.name): getattr(self, f.name) for f in fields(self) if f.name != "content"
        }


@dataclass(frozen=True, slots=True)
class SessionContext:
    """What to load at session start: the files, the assembled text, and a hint when cut."""

    agent_id: str
    session_key: str | None
    main_session: bool
    today: date
    budget_chars: int
    total_budget_chars: int
    raw_chars: int
    injected_chars: int
    truncated: bool
    files: tuple[ContextFile, ...]
    text: str
    hint: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON shape for `memoryd context --json` and MCP (camelCase)."""
        out = {camel_case(f.name): getattr(self, f.name) for f in fields(self)}
        out["today"] = self.today.isoformat()
        out["files"] = [f.to_dict() for f in self.files]
        return {("date" if k == "today" else k): v for k, v in out.items()}


def is_main_session(session_key: str | None) -> bool:
    """True for the main, private session: no key, a non-chat key, or a direct chat."""
    info = parse_session_key(session_key)
    if not info.normalized:
        return True
    if info.normalized.startswith(("subagent:", "cron:")) or ":subagent:" in info.normalized:
        return False
    return info.chat_type == "direct"


def truncate_for_context(content: str, name: str, max_chars: int) -> tuple[str, bool]:
    """(injected copy, truncated?) of `content` under `max_chars`: 70 % head + marker + 20 % tail."""
    trimmed = content.rstrip()
    if len(trimmed) <= max_chars:
        return trimmed, False
    head_n = int(max_chars * _HEAD_RATIO)
    tail_n = int(max_chars * _TAIL_RATIO)
    out = _cut(trimmed, name, head_n, tail_n)
    overflow = len(out) - max_chars
    if overflow > 0:
        # Small budgets: the marker needs more than the 10 % left over, so shrink head and tail
        # in the same 7:2 ratio (the marker only gets shorter as the numbers do).
        head_cut = -(-overflow * 7 // 9)
        head_n, tail_n = head_n - head_cut, tail_n - (overflow - head_cut)
        if head_n <= 0 or tail_n < 0:
            return trimmed[:max_chars], True
        out = _cut(trimmed, name, head_n, tail_n)
    return out[:max_chars], True


def _cut(text: str, name: str, head_n: int, tail_n: int) -> str:
    # One marker, OpenClaw's wording, with what was kept (the hint repeats the same numbers).
    marker = (
        f"\n[...truncated, read {name} for full content...] "
        f"(kept {head_n}+{tail_n} chars of {len(text)})\n"
    )
    return text[:head_n] + marker + (text[len(text) - tail_n :] if tail_n else "")


def daily_note_paths(workspace: Path, day: date) -> list[str]:
    """`memory/<day>.md` then `memory/<day>-<slug>.md` files (sorted) that exist as memory files."""
    root = MemoryRoot(str(workspace / MEMORY_DIR), "*.md")
    names = [
        f.rel.name for f in walk(root, anchor=workspace).files if is_daily_note_of(f.rel.name, day)
    ]
    exact = daily_note_name(day)
    names.sort(key=lambda n: (n != exact, n))
    return [f"{MEMORY_DIR}/{n}" for n in names]


def root_of(workspace: Path, rel: str) -> tuple[MemoryRoot, PurePosixPath]:
    """The root that serves `rel` (workspace-relative): its folder's `*.md`, or the file itself."""
    folder, _, name = rel.rpartition("/")
    return MemoryRoot(str(workspace / folder), "*.md" if folder else name), PurePosixPath(name)


def _read(workspace: Path, rel: str) -> str | None:
    """The file's text, read by descriptor (never through a symlink); None if absent or refused."""
    try:
        got = read_file(*root_of(workspace, rel), anchor=workspace)
    except MemorydError:
        return None
    return None if got is None else got.text


def _hint(cut: list[ContextFile], budget_chars: int) -> str:
    parts = ", ".join(
        f"{f.path} ({f.raw_chars:,} chars, {f.injected_chars:,} injected)" for f in cut
    )
    return (
        f"Truncated to fit the session-start budget ({budget_chars:,} chars per file): {parts}. "
        "Move detail out of these files into topic files under memory/*.md — memory_search "
        "finds them when needed — and keep MEMORY.md and daily notes short."
    )


def build_session_context(
    agent: ResolvedAgent, session_key: str | None, *, today: date
) -> SessionContext:
    """Assemble the session-start context for `session_key` on `today` within the agent's
    `bootstrapMaxChars` / `bootstrapTotalMaxChars` (reads files, writes none)."""
    budget_chars, total_budget_chars = agent.bootstrap_max_chars, agent.bootstrap_total_max_chars
    ws = agent.workspace
    main = is_main_session(session_key)
    found: list[tuple[str, FileKind, str | None]] = []
    for name in LONG_TERM_NAMES if main else ():  # the first of MEMORY.md and memory.md that reads
        if (text := _read(ws, name)) is not None:
            found.append((name, "long-term", text))
            break
    for day in (today - timedelta(days=1), today):
        found += [(rel, "daily", _read(ws, rel)) for rel in daily_note_paths(ws, day)]

    files: list[ContextFile] = []
    sections: list[str] = []
    remaining = total_budget_chars
    for rel, kind, raw in found:
        if raw is None:
            continue
        limit = min(budget_chars, remaining)
        if limit < _MIN_FILE_BUDGET and len(raw.rstrip()) > limit:
            files.append(ContextFile(rel, kind, len(raw), 0, True, ""))
            continue
        injected, cut = truncate_for_context(raw, rel, limit)
        remaining -= len(injected)
        files.append(ContextFile(rel, kind, len(raw), len(injected), cut, injected))
        if injected:
            sections.append(f"## {rel}\n\n{injected}")

    cut_files = [f for f in files if f.truncated]
    return SessionContext(
        agent_id=agent.agent_id,
        session_key=session_key,
        main_session=main,
        today=today,
        budget_chars=budget_chars,
        total_budget_chars=total_budget_chars,
        raw_chars=sum(f.raw_chars for f in files),
        injected_chars=sum(f.injected_chars for f in files),
        truncated=bool(cut_files),
        files=tuple(files),
        text="\n\n".join(sections) + ("\n" if sections else ""),
        hint=_hint(cut_files, budget_chars) if cut_files else None,
    )
