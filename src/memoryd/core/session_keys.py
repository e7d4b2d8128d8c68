"""Session keys: normalization and the channel / chat type they imply."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, Literal

ChatType = Literal["direct", "group", "channel"]

# Tokens that, in second position, mark `<channel>:<kind>:…`; anywhere, they mark a chat key.
_KIND_TOKENS: Final = frozenset({"group", "channel", "direct", "dm"})

# an empty id (`agent::x`) is no prefix: stripping it could turn a group key into a DM key
_AGENT_PREFIX_RE: Final = re.compile(r"agent:([^:]*):(.*)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class SessionKeyInfo:
    """What a session key says about the conversation it belongs to."""

    normalized: str
    channel: str | None = None
    chat_type: ChatType | None = None
    is_chat: bool = False


def normalize_session_key(raw: str | None) -> str:
    """Trim, lowercase and strip leading `agent:<id>:` prefixes; `""` for a missing key."""
    key = raw_session_key(raw)
    while (m := _AGENT_PREFIX_RE.fullmatch(key)) and m[1].strip() and m[2].strip():
        key = m[2].strip()
    return key


def raw_session_key(raw: str | None) -> str:
    """The key that `rawKeyPrefix` and legacy `agent:` keyPrefixes compare against."""
    return (raw or "").strip().lower()


def parse_session_key(raw: str | None) -> SessionKeyInfo:
    """Derive channel and chat type from a session key, the way OpenClaw's scope check does."""
    normalized = normalize_session_key(raw)
    if not normalized or normalized.startswith("subagent:"):
        return SessionKeyInfo(normalized)
    parts = [part for part in normalized.split(":") if part]
    kind_second = len(parts) >= 2 and parts[1] in _KIND_TOKENS
    # a `<channel>:<kind>:…` key's kind may be any part; another key's only a `:group:` inside it
    marks = parts if kind_second else normalized.split(":")[1:-1]
    chat_type: ChatType = (
        "group" if "group" in marks else "channel" if "channel" in marks else "direct"
    )
    return SessionKeyInfo(
        normalized,
        channel=parts[0] if kind_second else None,
        chat_type=chat_type,
        is_chat=not _KIND_TOKENS.isdisjoint(parts),
    )
