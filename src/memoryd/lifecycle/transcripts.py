"""Session transcripts (`<state>/agents/<id>/sessions/*.jsonl`) as a search source."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..config import ResolvedAgent
from ..core.transcripts import (
    Message,
    Role,
    SessionDelta,
    SessionDeltaTracker,
    TranscriptChunk,
    chunk_transcript,
    extract_text,
    parse_transcript_text,
    render_transcript,
    sanitize_text,
)
from ..fsio import open_private
from ..memfiles import list_transcripts as _list_transcripts
from ..memfiles import transcript_display_path

__all__ = [
    "Message",
    "ParsedTranscript",
    "Role",
    "SessionDelta",
    "SessionDeltaTracker",
    "TranscriptChunk",
    "chunk_transcript",
    "count_newlines",
    "extract_text",
    "list_transcripts",
    "parse_transcript",
    "parse_transcript_text",
    "render_transcript",
    "sanitize_text",
    "session_id",
    "sessions_enabled",
    "transcript_chunks",
    "transcript_display_path",
]


@dataclass(frozen=True, slots=True)
class ParsedTranscript:
    """What a transcript holds: its messages, how many lines were malformed, and its size."""

    path: Path
    messages: tuple[Message, ...]
    malformed: int
    lines: int
    size: int
    mtime: float

    @property
    def session_id(self) -> str:
        return session_id(self.path)


def session_id(path: Path) -> str:
    """`abc.jsonl` → `abc`."""
    name = path.name
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else path.stem


def sessions_enabled(agent: ResolvedAgent) -> bool:
    """True when the agent opted in: `experimental.sessionMemory` and `"sessions"` in `sources`."""
    return agent.sessions_enabled


def list_transcripts(agent: ResolvedAgent) -> list[Path]:
    """The agent's own `*.jsonl` transcripts (regular files, not symlinks), sorted by name."""
    return _list_transcripts(agent.sessions_dir)


def parse_transcript(path: Path, *, sanitize: bool = False) -> ParsedTranscript:
    """Read and parse one transcript; raises `OSError` only when the file cannot be read."""
    with open_private(path) as fh:  # never through a link planted among the transcripts
        st = os.fstat(fh.fileno())
        data = fh.read()
    messages, malformed, lines = parse_transcript_text(
        data.decode("utf-8", errors="replace"), sanitize=sanitize
    )
    return ParsedTranscript(path, tuple(messages), malformed, lines, len(data), st.st_mtime)


def transcript_chunks(
    path: Path, tokens: int, overlap: int, *, sanitize: bool = True
) -> list[TranscriptChunk]:
    """Parse `path` and chunk it for the index (see `chunk_transcript`)."""
    parsed = parse_transcript(path, sanitize=sanitize)
    return chunk_transcript(parsed.messages, tokens=tokens, overlap=overlap)


def count_newlines(path: Path, start: int = 0, *, block: int = 1 << 16) -> int:
    """Newlines in `path` from byte `start` on: the new JSONL lines since an offset."""
    n = 0
    with open_private(path) as fh:
        fh.seek(start)
        while chunk := fh.read(block):
            n += chunk.count(b"\n")
    return n


# --------------------------------------------------------------------------- delta tracking
