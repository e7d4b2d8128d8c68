"""Scope rules: which sessions may search memory (OpenClaw's `session.sendPolicy` schema).

Pure functions over session-key strings and the validated `ScopeConfig`; the orchestrator
calls `evaluate_scope` before every `memory_search` and logs `decision.log_message()` on a
denial.
"""

from __future__ import annotations

from ..core.session_keys import (
    ChatType,
    SessionKeyInfo,
    normalize_session_key,
    parse_session_key,
    raw_session_key,
)
from ._evaluate import (
    DEFAULT_SCOPE,
    DecisionReason,
    ScopeDecision,
    default_scope,
    evaluate_scope,
    parse_scope,
)

__all__ = [
    "DEFAULT_SCOPE",
    "ChatType",
    "DecisionReason",
    "ScopeDecision",
    "SessionKeyInfo",
    "default_scope",
    "evaluate_scope",
    "normalize_session_key",
    "parse_scope",
    "parse_session_key",
    "raw_session_key",
]
