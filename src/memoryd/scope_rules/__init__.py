"""Scope rules: which sessions may search memory (OpenClaw's `session.sendPolicy` schema)."""

from __future__ import annotations

from typing import Final

from ..config import ScopeConfig, ScopeMatch
from ..core.session_keys import SessionKeyInfo, parse_session_key, raw_session_key

# Session keys are caller input; cap what one can put in a log line.
_MAX_LOGGED_KEY_CHARS: Final = 200


def _printable(text: str) -> str:
    """Keeps a hostile key from forging log lines (newlines) or flooding them (length)."""
    shown = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    if len(shown) > _MAX_LOGGED_KEY_CHARS:
        return shown[:_MAX_LOGGED_KEY_CHARS] + "…"
    return shown


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


def scope_denial(scope: ScopeConfig | None, session_key: str | None) -> str | None:
    """Why this session may not search memory (the log line), or None; `scope=None` is the
    shipped default, direct chats only."""
    info = parse_session_key(session_key)
    if not info.is_chat:  # a session that is no chat (`main`, a sub-agent) is never filtered
        return None
    if scope is None:
        allowed = info.chat_type == "direct"
    else:
        raw_key = raw_session_key(session_key)
        rule = next((r for r in scope.rules or [] if _matches(r.match, info, raw_key)), None)
        allowed = (rule.action if rule else scope.default or "allow") == "allow"
    if allowed:
        return None
    return (
        f"memory search denied by scope (channel={info.channel or 'unknown'}, "
        f"chatType={info.chat_type or 'unknown'}, session={_printable((session_key or '').strip())})"
    )
