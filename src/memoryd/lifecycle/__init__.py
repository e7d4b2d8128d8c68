"""lifecycle: what an agent loads and writes when — policy, state and file operations.

memoryd cannot run the agent's model; it owns the rules and the files around it:

- `build_session_context`: the memory files to load at session start (`memoryd context`);
- `append_memory`: append-only, locked, fsynced writes to daily notes or `MEMORY.md`
  (`memory_append`);
- `check_flush` / `record_flush` / `is_no_reply`: the pre-compaction memory flush policy and its
  once-per-compaction-cycle state in `sessions.json`;
- `parse_transcript` / `transcript_chunks` / `SessionDeltaTracker`: session transcripts as a
  search source for the built-in index;
- `export_sessions` / `redact_secrets`: sanitised Markdown exports for qmd's sessions collection.
"""

from __future__ import annotations

from ..core.redact import redact_secrets
from .context import (
    DEFAULT_BOOTSTRAP_MAX_CHARS,
    DEFAULT_BOOTSTRAP_TOTAL_MAX_CHARS,
    ContextFile,
    SessionContext,
    build_session_context,
    daily_note_paths,
    is_main_session,
    truncate_for_context,
)
from .flush import (
    SILENT_REPLY_TOKEN,
    FlushDecision,
    FlushReason,
    FlushRecord,
    FlushState,
    FlushStateError,
    check_flush,
    flush_threshold,
    is_no_reply,
    record_flush,
)
from .session_export import (
    ExportReport,
    SessionExportError,
    export_sessions,
    manifest_name,
    render_session_markdown,
    session_export_dir,
)
from .transcripts import (
    Message,
    ParsedTranscript,
    SessionDelta,
    SessionDeltaTracker,
    TranscriptChunk,
    chunk_transcript,
    count_newlines,
    list_transcripts,
    parse_transcript,
    parse_transcript_text,
    sanitize_text,
    session_id,
    sessions_enabled,
    transcript_chunks,
    transcript_display_path,
)
from .writes import (
    MAX_APPEND_BYTES,
    AppendResult,
    AppendTarget,
    InvalidMemoryWrite,
    MemoryWriteFailed,
    WorkspaceReadOnly,
    append_memory,
    append_target_path,
)

__all__ = [
    "DEFAULT_BOOTSTRAP_MAX_CHARS",
    "DEFAULT_BOOTSTRAP_TOTAL_MAX_CHARS",
    "MAX_APPEND_BYTES",
    "SILENT_REPLY_TOKEN",
    "AppendResult",
    "AppendTarget",
    "ContextFile",
    "ExportReport",
    "FlushDecision",
    "FlushReason",
    "FlushRecord",
    "FlushState",
    "FlushStateError",
    "InvalidMemoryWrite",
    "MemoryWriteFailed",
    "Message",
    "ParsedTranscript",
    "SessionContext",
    "SessionDelta",
    "SessionDeltaTracker",
    "SessionExportError",
    "TranscriptChunk",
    "WorkspaceReadOnly",
    "append_memory",
    "append_target_path",
    "build_session_context",
    "check_flush",
    "chunk_transcript",
    "count_newlines",
    "daily_note_paths",
    "export_sessions",
    "flush_threshold",
    "is_main_session",
    "is_no_reply",
    "list_transcripts",
    "manifest_name",
    "parse_transcript",
    "parse_transcript_text",
    "record_flush",
    "redact_secrets",
    "render_session_markdown",
    "sanitize_text",
    "session_export_dir",
    "session_id",
    "sessions_enabled",
    "transcript_chunks",
    "transcript_display_path",
    "truncate_for_context",
]
