"""lifecycle: what an agent loads and writes when — policy, state and file operations."""

from __future__ import annotations

from ..core.transcripts import is_no_reply
from .context import build_session_context
from .flush import check_flush
from .session_export import export_sessions
from .writes import append_memory

__all__ = [
    "append_memory",
    "build_session_context",
    "check_flush",
    "export_sessions",
    "is_no_reply",
]
