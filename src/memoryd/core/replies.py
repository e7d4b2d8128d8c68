"""The silent reply: when a model answer is only `NO_REPLY`, the host shows nothing."""

from __future__ import annotations

import json
import re
from typing import Final

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
