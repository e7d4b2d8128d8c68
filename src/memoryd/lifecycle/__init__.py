"""lifecycle: what an agent loads and writes when — policy, state and file operations."""

from __future__ import annotations

from ..core.replies import is_no_reply
from .context import build_session_context
from .flush import check_flush
from .forget import (
    forget_lines,
    load_tombstones,
    parse_target,
    remove_derived,
    select_lines,
    transcripts_with_forgotten,
)
from .session_export import export_sessions, session_export_dir
from .writes import append_memory, check_writable

__all__ = [
    "append_memory",
    "build_session_context",
    "check_flush",
    "check_writable",
    "export_sessions",
    "forget_lines",
    "is_no_reply",
    "load_tombstones",
    "parse_target",
    "remove_derived",
    "select_lines",
    "session_export_dir",
    "transcripts_with_forgotten",
]
