"""Session transcripts (`<state>/agents/<id>/sessions/*.jsonl`) as a search source."""

from __future__ import annotations

from pathlib import Path

from ..config import ResolvedAgent
from ..core.transcripts import Message, parse_transcript_text
from ..fsio import open_private
from ..memfiles import list_transcripts as _list_transcripts


def session_id(path: Path) -> str:
    """`abc.jsonl` → `abc`."""
    return path.name.removesuffix(".jsonl")


def list_transcripts(agent: ResolvedAgent) -> list[Path]:
    """The agent's own `*.jsonl` transcripts (regular files, not symlinks), sorted by name."""
    return _list_transcripts(agent.sessions_dir)


def parse_transcript(path: Path, *, sanitize: bool = False) -> tuple[list[Message], int, int]:
    """(messages, malformed lines, lines) of one transcript; `OSError` only when it cannot be read."""
    with open_private(path) as fh:  # never through a link planted among the transcripts
        data = fh.read()
    return parse_transcript_text(data.decode("utf-8", errors="replace"), sanitize=sanitize)
