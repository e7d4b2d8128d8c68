"""Session transcripts (`<state>/agents/<id>/sessions/*.jsonl`) as a search source.

A transcript is JSON Lines. Records of `type: "message"` whose message role is `user` or
`assistant` carry the conversation: `{"type": "message", "message": {"role": "user", "content":
[{"type": "text", "text": "…"}]}}` (OpenClaw's wrapped form; a flat `role`/`content` on the record
and a plain string `content` are accepted too). Only `text` blocks count; tool calls, images and
every other record type are ignored. A line that is not a JSON object is skipped and counted in
`malformed`; nothing here raises on bad content.

Each kept message renders as one line, `User: …` or `Assistant: …`, whitespace collapsed, and
remembers its 1-based JSONL line so a search hit can point back at the transcript.

With `sanitize=True` (the default for chunks and exports) the text is also cleaned:

- blocks removed with their content: `<system-reminder>`, `<thinking>`, `<think>`,
  `<reasoning>`, `<antThinking>`, `<relevant-memories>`, `<memory-context>` (an unclosed one
  runs to the end of the message);
- wrapper tags removed, content kept: `<final>`, `<reply>`;
- reply directives: `[[reply_to_current]]`, `[[reply_to: 123]]`, `[[audio_as_voice]]`,
  `[[tts]]`/`[[tts: …]]` and any other `[[word_word…]]` / `[[word_word: …]]`;
- channel metadata: a leading envelope such as `[Telegram Alice id:42 2026-01-05 10:00 UTC]`,
  `[message_id: …]` tags and `… (untrusted metadata):` fenced JSON blocks;
- secrets, via `redact_secrets`;
- assistant messages that are only the silent token (`NO_REPLY`) or `HEARTBEAT_OK` are dropped.

`SessionDeltaTracker` is the pure bookkeeping behind "sync transcripts once enough new data
accumulated" (`memorySearch.sync.sessions.{deltaBytes, deltaMessages}`).
"""

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
    """What a transcript holds: its messages, how many lines were malformed, and its size.

    `lines` counts complete (newline-terminated) JSONL lines; a trailing line still being
    written is neither parsed nor counted as malformed.
    """

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
