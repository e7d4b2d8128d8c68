"""Secret redaction for text that leaves a transcript (session exports, transcript chunks)."""

from __future__ import annotations

import re
from typing import Final

from ..text import merge_spans
from ._checks import _VALUE_CHECKS, _answer_spans
from ._gitleaks import _gitleaks_spans, _Ruleset, _ruleset
from ._rules import SECRET_PATTERNS, SecretSpan

REDACTED: Final = "[REDACTED]"


def _local_spans(ruleset: _Ruleset, text: str, picked: list[int]) -> list[SecretSpan]:
    spans = []
    for index in picked:
        if index >= len(ruleset.local):
            break  # gitleaks' rules from here
        rule, pattern = SECRET_PATTERNS[index], ruleset.local[index]
        if rule.prefilter is not None and not re.search(rule.prefilter, text):
            continue
        name = rule.name
        check = _VALUE_CHECKS.get(name)
        helpers = set(pattern.groupindex.values())  # named groups are context, never the secret
        for match in pattern.finditer(text):
            group = 0
            if pattern.groups > len(helpers):
                group = next(
                    g
                    for g in range(1, pattern.groups + 1)
                    if g not in helpers and match.start(g) >= 0
                )
            span = match.span(group) if check is None else check(match, group)
            if span is not None and span[1] > span[0]:
                spans.append(SecretSpan(span[0], span[1], name))
    return spans


def secret_spans(text: str, *, previous: str | None = None) -> list[SecretSpan]:
    """Every secret in `text`, sorted, maybe overlapping; `previous` is the message it answers."""
    if not text:
        return []
    ruleset = _ruleset()
    picked = ruleset.picked(text)
    spans = _local_spans(ruleset, text, picked) + _gitleaks_spans(ruleset, text, picked)
    if previous:
        spans += _answer_spans(text, previous)
    return sorted(spans)


def redact_secrets(text: str, *, previous: str | None = None) -> str:
    """`text` with every secret `secret_spans` finds replaced by `[REDACTED]`."""
    spans = secret_spans(text, previous=previous)
    if not spans:
        return text
    out: list[str] = []
    last = 0
    for start, end in merge_spans(s[:2] for s in spans):
        out += (text[last:start], REDACTED)
        last = end
    return "".join(out) + text[last:]
