"""The rules loaded on first use: memoryd's own and gitleaks' default ruleset (`gitleaks.toml`,
vendored verbatim, applied as gitleaks does), picked for a text by the keywords it holds."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from ._checks import _entropy
from ._rules import SECRET_PATTERNS, SecretSpan


@dataclass(frozen=True, slots=True)
class _Rule:
    id: str
    regex: Any  # a compiled re2 bytes pattern (google-re2 ships no type information)
    secret_group: int
    entropy: float | None
    # Allowlists, each folded into one re2 str pattern (or None): searched in the secret (the
    # global allowlist and stopwords included), the whole match, the secret's line.
    allow_secret: Any
    allow_match: Any
    allow_line: Any


@dataclass(frozen=True, slots=True)
class _Ruleset:
    local: tuple[re.Pattern[str], ...]  # SECRET_PATTERNS compiled
    rules: tuple[_Rule, ...]  # gitleaks'
    #: Each lowercased keyword (`vocabulary[i]`) → the rules naming it: local rule i is index i,
    #: gitleaks rule j is index len(local) + j.
    by_keyword: tuple[tuple[int, ...], ...]
    always: frozenset[int]  # rules without keywords
    vocabulary: tuple[str, ...]
    finder: Any  # an RE2 set of `vocabulary`, which finds them all in one pass

    def picked(self, text: str) -> list[int]:
        """The indexes of the rules to run on `text` (those of the keywords it holds), in order."""
        found = set(self.always)
        for i in self.finder.Match(text.lower()) or ():
            found.update(self.by_keyword[i])
        return sorted(found)


@cache
def _ruleset() -> _Ruleset:
    """Load and compile the vendored gitleaks ruleset (once, on first use)."""
    # Imported here: loading the module must stay cheap (indexing imports it, CLI start pays).
    import importlib.resources
    import tomllib

    import re2  # type: ignore[import-untyped]

    raw = importlib.resources.files(__package__).joinpath("gitleaks.toml").read_text("utf-8")
    config = tomllib.loads(raw)
    glob = config.get("allowlist", {})

    def any_of(patterns: list[str]) -> Any:
        # RE2 scopes inline flags to their group, so `(?:a)|(?:b)` means what a and b meant.
        return re2.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None

    def stop(words: list[str]) -> list[str]:
        # a secret holding a stopword, in any letter case, is cleared
        return ["(?i)" + "|".join(re.escape(w) for w in words)] if words else []

    glob_secret = list(glob.get("regexes", ())) + stop(glob.get("stopwords", []))
    shared_secret = any_of(glob_secret)
    rules: list[_Rule] = []
    keywords: list[set[str]] = [set(rule.keywords) for rule in SECRET_PATTERNS]
    for spec in config["rules"]:
        if "regex" not in spec or "path" in spec:
            continue
        allow: dict[str, list[str]] = {"secret": [], "match": [], "line": []}
        for allowlist in spec.get("allowlists", ()):
            if allowlist.get("condition") == "AND" and "paths" in allowlist:
                continue  # holds only together with a path, and a transcript has none
            allow[allowlist.get("regexTarget", "secret")].extend(allowlist.get("regexes", ()))
            allow["secret"] += stop(allowlist.get("stopwords", []))
        rules.append(
            _Rule(
                id=spec["id"],
                regex=re2.compile(spec["regex"].encode("utf-8")),
                secret_group=int(spec.get("secretGroup", 0)),
                entropy=spec.get("entropy"),
                allow_secret=any_of(glob_secret + allow["secret"])
                if allow["secret"]
                else shared_secret,
                allow_match=any_of(allow["match"]),
                allow_line=any_of(allow["line"]),
            )
        )
        keywords.append({k.lower() for k in spec.get("keywords", ())})
    by_keyword: dict[str, list[int]] = {}
    for index, words in enumerate(keywords):
        for word in words:
            by_keyword.setdefault(word, []).append(index)
    vocabulary = tuple(sorted(by_keyword))
    finder = re2.Set.SearchSet()
    for word in vocabulary:
        finder.Add(re.escape(word))
    finder.Compile()
    return _Ruleset(
        local=tuple(re.compile(rule.pattern, rule.flags) for rule in SECRET_PATTERNS),
        rules=tuple(rules),
        by_keyword=tuple(tuple(by_keyword[word]) for word in vocabulary),
        always=frozenset(index for index, words in enumerate(keywords) if not words),
        vocabulary=vocabulary,
        finder=finder,
    )


# gitleaks tests a line allowlist against the secret's whole line; here the line is clipped to
# this many characters either side, so a megabyte-long line costs no more per finding.
_LINE_WINDOW: Final = 1000


def _line_around(text: str, start: int, end: int) -> str:
    lo, hi = max(0, start - _LINE_WINDOW), min(len(text), end + _LINE_WINDOW)
    line_start = text.rfind("\n", lo, start)
    line_end = text.find("\n", end, hi)
    return text[lo if line_start < 0 else line_start + 1 : hi if line_end < 0 else line_end]


def _is_allowed(rule: _Rule, text: str, start: int, end: int, whole: str) -> bool:
    """gitleaks' filters on the secret `text[start:end]`: its entropy floor, then the allowlists."""
    secret = text[start:end]
    if rule.entropy is not None:
        if _entropy(secret) <= rule.entropy:
            return True
        # gitleaks' own extra condition: a generic secret must contain a digit.
        if rule.id.startswith("generic") and not any(c.isdigit() for c in secret):
            return True
    return (
        (rule.allow_secret is not None and rule.allow_secret.search(secret) is not None)
        or (rule.allow_match is not None and rule.allow_match.search(whole) is not None)
        or (
            rule.allow_line is not None
            and rule.allow_line.search(_line_around(text, start, end)) is not None
        )
    )


def _char_offsets(data: bytes) -> Callable[[int], int]:
    """Byte offsets into UTF-8 `data` → offsets into its text, for offsets that never decrease."""
    last_byte = last_char = 0  # where the next decode starts

    def to_char(byte: int) -> int:
        nonlocal last_byte, last_char
        if byte < last_byte:  # not expected; stay correct anyway
            last_byte = last_char = 0
        last_char += len(data[last_byte:byte].decode("utf-8"))
        last_byte = byte
        return last_char

    return to_char


def _gitleaks_spans(ruleset: _Ruleset, text: str, picked: list[int]) -> list[SecretSpan]:
    candidates = [i - len(ruleset.local) for i in picked if i >= len(ruleset.local)]
    if not candidates:
        return []
    # One encoding for every rule (google-re2 re-encodes a str on each call).
    data = text.encode("utf-8")
    ascii_only = len(data) == len(text)
    spans = []
    for index in candidates:
        rule = ruleset.rules[index]
        offset = _char_offsets(data) if not ascii_only else None
        for match in rule.regex.finditer(data):
            group, groups = rule.secret_group, rule.regex.groups
            if group == 0 and groups:
                group = next((g for g in range(1, groups + 1) if match.group(g)), 0)
            if group > groups or not match.group(group):
                continue
            bounds = (match.start(), match.start(group), match.end(group), match.end())
            first, start, end, last = bounds if offset is None else map(offset, bounds)
            if not _is_allowed(rule, text, start, end, text[first:last]):
                spans.append(SecretSpan(start, end, rule.id))
    return spans
