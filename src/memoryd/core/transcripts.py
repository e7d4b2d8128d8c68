"""Pure transcript rules: parse JSONL into messages, sanitise (docs/redaction.md), drop silent
replies, chunk, track growth."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Final, Literal

from .chunking import Chunk, chunk_lines
from .redact import redact_secrets

Role = Literal["user", "assistant"]

_BLOCK_RE: Final = re.compile(
    r"<(?P<tag>system-reminder|thinking|think|reasoning|antThinking|relevant-memories|memory-context)"
    r"\b[^>]*>.*?(?:</(?P=tag)\s*>|\Z)",
    re.DOTALL | re.IGNORECASE,
)
_WRAPPER_RE: Final = re.compile(r"</?(?:final|reply)\b[^>]*>", re.IGNORECASE)
_DIRECTIVE_RE: Final = re.compile(
    r"\[\[\s*(?:reply_to_current|audio_as_voice|tts|reply_to|[a-z][a-z0-9]*(?:_[a-z0-9]+)+)"
    r"(?:\s*:[^\]\n]*)?\s*\]\]",
    re.IGNORECASE,
)
_ENVELOPE_RE: Final = re.compile(
    r"\A\s*\[[^\]\n]{0,300}?(?:\d{4}-\d{2}-\d{2}|\bid:)[^\]\n]{0,300}\]\s*", re.IGNORECASE
)
_MESSAGE_ID_RE: Final = re.compile(r"\[message_id:\s*[^\]\n]*\]", re.IGNORECASE)
_UNTRUSTED_BLOCK_RE: Final = re.compile(
    r"^[^\n]*\(untrusted[^)\n]*\):?[ \t]*\n```[a-z]*\n.*?\n```[ \t]*$",
    re.DOTALL | re.IGNORECASE | re.MULTILINE,
)
_WS_RE: Final = re.compile(r"\s+")


# The silent reply: when a model answer is only `NO_REPLY`, the host shows nothing.
SILENT_REPLY_TOKEN: Final = "NO_REPLY"

# Only the whole reply: one merely ending with the token is shown (OpenClaw #19537).
_SILENT_RE: Final = re.compile(
    r"\A\s*([*_`\"']{0,3})\s*NO_REPLY(?:\s+NO_REPLY)*\s*\1\s*[.!]?\s*\Z", re.IGNORECASE
)
_THINK_PREFIX_RE: Final = re.compile(
    r"\A\s*<(think|thinking|reasoning)\b[^>]*>.*?</\1\s*>(?P<rest>.*)\Z", re.DOTALL | re.IGNORECASE
)


def is_no_reply(text: str | None) -> bool:
    """True when a model answer is only the silent token `NO_REPLY`, so the host suppresses it."""
    if not text or not text.strip():
        return False
    think = _THINK_PREFIX_RE.match(text)
    if think is not None:
        text = think.group("rest")
    if _SILENT_RE.match(text):
        return True
    stripped = text.strip()
    if stripped.startswith(("{", '"')):
        try:
            value = json.loads(stripped)
        except ValueError:
            return False
        if isinstance(value, dict) and list(value) == ["action"]:
            value = value["action"]
        return isinstance(value, str) and value.strip().upper() == SILENT_REPLY_TOKEN
    return False


@dataclass(frozen=True, slots=True)
class Message:
    """One user or assistant message: its cleaned one-line text and 1-based JSONL line."""

    role: Role
    text: str
    line_no: int


def sanitize_text(text: str, *, previous: str | None = None) -> str:
    """Strip metadata, directives and thinking blocks and redact secrets, also a password given
    in reply to `previous` asking for one."""
    text = _BLOCK_RE.sub(" ", text)
    text = _UNTRUSTED_BLOCK_RE.sub(" ", text)
    text = _ENVELOPE_RE.sub("", text)
    text = _MESSAGE_ID_RE.sub(" ", text)
    text = _DIRECTIVE_RE.sub(" ", text)
    text = _WRAPPER_RE.sub(" ", text)
    return redact_secrets(text, previous=previous)


_MALFORMED: Final = object()


def _parse_line(line: str) -> tuple[Role, str] | object:
    """A JSONL line's (role, text), None when it holds no message, or `_MALFORMED`."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return _MALFORMED
    if not isinstance(record, dict):
        return _MALFORMED
    if record.get("type") != "message":
        return None
    inner = record.get("message")
    body = inner if isinstance(inner, dict) else record
    role = body.get("role")
    if role not in ("user", "assistant"):
        return None
    relayed = (r.get("provenance") for r in (record, body))
    if role == "user" and any(
        isinstance(p, dict) and p.get("kind") == "inter_session" for p in relayed
    ):
        return None  # OpenClaw: text relayed between sessions/sub-agents is not the user's own
    content = body.get("content")
    if isinstance(content, list):  # the `text` blocks, joined by newlines
        blocks = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        texts = [t for t in blocks if isinstance(t, str)]
        content = "\n".join(texts) if texts else None
    return (role, content) if isinstance(content, str) else None


def parse_transcript_text(text: str, *, sanitize: bool = False) -> tuple[list[Message], int, int]:
    """(messages, malformed line count, complete line count) of JSONL `text`. Pure."""
    lines = text.split("\n")
    # the part after the last newline is still being written unless it parses as a message
    if not isinstance(_parse_line(lines[-1]), tuple):
        lines.pop()
    messages: list[Message] = []
    malformed = 0
    previous: str | None = None  # the raw text of the message before, for answers to questions
    for number, line in enumerate(lines, start=1):
        got = _parse_line(line)
        malformed += got is _MALFORMED
        if not isinstance(got, tuple):
            continue
        role, raw = got
        clean = _WS_RE.sub(" ", sanitize_text(raw, previous=previous) if sanitize else raw).strip()
        previous = raw
        silent = (
            sanitize and role == "assistant" and (is_no_reply(clean) or clean == "HEARTBEAT_OK")
        )
        if clean and not silent:
            messages.append(Message(role, clean, number))
    return messages, malformed, len(lines)


def render_transcript(messages: Iterable[Message]) -> str:
    """One `User: …`/`Assistant: …` line per message."""
    return "\n".join(f"{m.role.capitalize()}: {m.text}" for m in messages)


def chunk_transcript(messages: Iterable[Message], *, tokens: int, overlap: int) -> list[Chunk]:
    """Chunk rendered messages; chunk line numbers are the messages' JSONL lines. Pure."""
    msgs = list(messages)
    chunks = chunk_lines(render_transcript(msgs), tokens=tokens, overlap=overlap)
    return [
        replace(c, start_line=msgs[c.start_line - 1].line_no, end_line=msgs[c.end_line - 1].line_no)
        for c in chunks
    ]


def transcript_due(grew_bytes: int, grew_lines: int, delta_bytes: int, delta_messages: int) -> bool:
    """Whether a transcript grown by `grew_bytes` and `grew_lines` complete lines since it was
    indexed is due: past either delta (0: off; both 0: any growth)."""
    if delta_bytes <= 0 and delta_messages <= 0:
        return grew_bytes > 0 or grew_lines > 0
    return 0 < delta_bytes <= grew_bytes or 0 < delta_messages <= grew_lines
