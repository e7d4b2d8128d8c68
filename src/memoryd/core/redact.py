"""Secret redaction for text that leaves a transcript (session exports, transcript chunks).

Pure string functions. A redacted secret becomes `[REDACTED]`; for `key=value` shapes and
`Bearer` headers the key or scheme is kept (`api_key=[REDACTED]`, `Bearer [REDACTED]`) so the
sentence still reads. Every secret shape is recognised by its own prefix or by a key name that
says "secret"; free text such as "the bearer of bad news" or `max_tokens=4000` is left alone.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["REDACTED", "SECRET_PATTERNS", "redact_secrets"]

REDACTED: Final = "[REDACTED]"

# A token-shaped secret must not sit inside a longer identifier: `task-ant-...` is not a key.
_L: Final = r"(?<![A-Za-z0-9_\-])"
_R: Final = r"(?![A-Za-z0-9_\-])"

# (name, pattern). Whole-match patterns replace the match with REDACTED; patterns with a
# `keep` group keep that group and redact the rest of the match.
SECRET_PATTERNS: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    (
        "private_key_block",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r"[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
    ),
    (
        "url_password",
        re.compile(r"(?P<keep>\b[a-z][a-z0-9+.\-]*://[^\s/:@]+:)[^\s/@]+(?=@)", re.IGNORECASE),
    ),
    (
        "bearer_token",
        re.compile(r"(?P<keep>\bBearer\s+)[A-Za-z0-9\-._~+/]{16,}=*", re.IGNORECASE),
    ),
    (
        # `Basic`/`Token` are ordinary words, so their credential must contain a digit.
        "auth_header",
        re.compile(
            r"(?P<keep>\b(?:Basic|Token)\s+)(?=[A-Za-z\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{16,}=*",
            re.IGNORECASE,
        ),
    ),
    ("anthropic_key", re.compile(_L + r"sk-ant-[A-Za-z0-9_\-]{16,}" + _R)),
    (
        "openai_key",
        re.compile(_L + r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}" + _R),
    ),
    ("stripe_key", re.compile(_L + r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}" + _R)),
    (
        "github_token",
        re.compile(_L + r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})" + _R),
    ),
    ("aws_access_key_id", re.compile(_L + r"(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}" + _R)),
    ("slack_token", re.compile(_L + r"xox[bpars]-[A-Za-z0-9\-]{10,}" + _R)),
    ("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+")),
    ("google_api_key", re.compile(_L + r"AIza[0-9A-Za-z_\-]{35}" + _R)),
    ("telegram_bot_token", re.compile(_L + r"\d{8,10}:AA[A-Za-z0-9_\-]{33}" + _R)),
    (
        "jwt",
        re.compile(_L + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*" + _R),
    ),
    (
        # `api_key=…`, `OPENAI_API_KEY: …`, `"apiKey": "…"`, `password = '…'`. The key must END
        # with a secret word, so `max_tokens=4000` or `token_count: 12` stay.
        "key_value",
        re.compile(
            r"(?P<keep>(?<![A-Za-z0-9])[\"']?[A-Za-z0-9_.\-]*?"
            r"(?:api[_\-]?key|apikey|secret|secret[_\-]?key|secret[_\-]?access[_\-]?key"
            r"|access[_\-]?key|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token"
            r"|session[_\-]?token|bearer[_\-]?token|client[_\-]?secret|private[_\-]?key"
            r"|password|passwd|passphrase|token)"
            r"[\"']?\s*[:=]\s*)"
            r"(?:\"(?!\[REDACTED)[^\"\n]{4,}\"|'(?!\[REDACTED)[^'\n]{4,}'|(?![\"'\[])[^\s\"',;}]{6,})",
            re.IGNORECASE,
        ),
    ),
)


def _replace(match: re.Match[str]) -> str:
    keep = match.groupdict().get("keep")
    if keep is None:
        return REDACTED
    value = match.group(0)[len(keep) :]
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{keep}{quote}{REDACTED}{quote}"


def redact_secrets(text: str) -> str:
    """`text` with every recognised secret replaced by `[REDACTED]` (see `SECRET_PATTERNS`)."""
    for _name, pattern in SECRET_PATTERNS:
        text = pattern.sub(_replace, text)
    return text
