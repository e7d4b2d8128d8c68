"""Scope rules: which sessions may search memory (OpenClaw's `session.sendPolicy` schema)."""

from __future__ import annotations

import dataclasses
from typing import Final

from ..config import ScopeConfig, ScopeMatch, ScopeRule
from ..core.session_keys import ChatType, SessionKeyInfo, parse_session_key, raw_session_key

# Session keys are caller input; cap what one can put in a log line.
_MAX_LOGGED_KEY_CHARS: Final = 200


def default_scope() -> ScopeConfig:
    """Deny all but direct chats; built unvalidated so a search never imports pydantic for it."""
    return ScopeConfig(
        default="deny", rules=[ScopeRule(action="allow", match=ScopeMatch(chat_type="direct"))]
    )


def _printable(text: str) -> str:
    """Keeps a hostile key from forging log lines (newlines) or flooding them (length)."""
    shown = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if len(shown) > _MAX_LOGGED_KEY_CHARS:
        return shown[:_MAX_LOGGED_KEY_CHARS] + "…"
    return shown


@dataclasses.dataclass(frozen=True, slots=True)
class ScopeDecision:
    """`evaluate_scope`'s outcome, with what it derived from the session key for the log."""

    allowed: bool
    channel: str | None
    chat_type: ChatType | None
    session_key: str | None

    def log_message(self) -> str:
        verdict = "allowed" if self.allowed else "denied"
        session = _printable((self.session_key or "").strip()) or "<none>"
        return (
            f"memory search {verdict} by scope (channel={self.channel or 'unknown'}, "
            f"chatType={self.chat_type or 'unknown'}, session={session})"
        )


def _matches(match: ScopeMatch | None, info: SessionKeyInfo, raw_key: str) -> bool:
    """Config strings compare trimmed and case-insensitively; blank means "not set"."""
    if match is None:
        return True
    channel, raw_prefix, key_prefix = (
        (v or "").strip().lower() for v in (match.channel, match.raw_key_prefix, match.key_prefix)
    )
    # Older configs wrote keyPrefix as `agent:<id>:…`, meaning the raw key.
    key = raw_key if key_prefix.startswith("agent:") else info.normalized
    return (
        (not channel or channel == info.channel)
        and (match.chat_type is None or match.chat_type == info.chat_type)
        and raw_key.startswith(raw_prefix)
        and key.startswith(key_prefix)
    )


def evaluate_scope(scope: ScopeConfig | None, session_key: str | None) -> ScopeDecision:
    """May this session search memory? `scope=None` applies the shipped default (DMs only)."""
    # a fresh default each time: a caller changing one it was given widens nothing
    effective = default_scope() if scope is None else scope
    info = parse_session_key(session_key)
    allowed = True  # a session that is no chat (`main`, a sub-agent) is never filtered
    if info.is_chat:
        raw_key = raw_session_key(session_key)
        rule = next((r for r in effective.rules or [] if _matches(r.match, info, raw_key)), None)
        allowed = (rule.action if rule else effective.default or "allow") == "allow"
    return ScopeDecision(allowed, info.channel, info.chat_type, session_key)
