"""Secret redaction for text that leaves a transcript (session exports, transcript chunks).

`redact_secrets(text)` replaces every recognised secret with `[REDACTED]`. Two rule sets run over
the same original text and their spans are merged, so rule order does not matter and a secret
found by both is redacted once:

- **gitleaks' default ruleset** (`gitleaks.toml` beside this module: ~220 provider formats,
  maintained upstream and vendored verbatim as data; docs/redaction.md says where it comes from
  and how to refresh it). Its regexes are written for Go's RE2 dialect, so they run on RE2
  (`google-re2`): gitleaks' own semantics, and matching linear in the input, which a backtracking
  engine cannot promise for ~220 third-party patterns. As in gitleaks, a rule runs only when one
  of its keywords occurs in the text, its capture group (if any) is the secret, and its entropy
  floor and allowlists (global and per rule) apply. Rules that only apply to file paths are
  skipped: a transcript has no path.
- **memoryd's own rules** (`SECRET_PATTERNS`): formats gitleaks lacks (LLM-provider keys, Stripe
  webhook secrets, Discord bot tokens, Azure account keys, …), shapes memoryd has always redacted,
  `key=value` / header / URL forms, and prose ("the root password is …", "my Mistral key is …").
  Where a pattern has capture groups only the group that matched is the secret, so the key name or
  scheme stays and the sentence still reads (`api_key=[REDACTED]`, `Bearer [REDACTED]`,
  `postgres://admin:[REDACTED]@db`). Each pattern starts at a literal or a short word list and
  repeats only bounded or non-overlapping classes, so matching stays linear.

Both sets are gated by keywords found in one pass over the lowercased text, so ordinary prose —
most messages — costs one regex scan. Ordinary text must survive: "the bearer of bad news",
`max_tokens=4000`, git SHAs, UUIDs and placeholders (`${DB_PASSWORD}`, `<your-api-key>`,
`os.environ[...]`) are left alone (`tests/test_redact.py` holds both corpora). Nothing is
compiled at import: RE2 and the rules load on the first call (a few tenths of a second, once per
process), so importing this module stays as cheap as it was.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any, Final, NamedTuple

from .records import record

__all__ = [
    "REDACTED",
    "SECRET_PATTERNS",
    "SecretPattern",
    "SecretSpan",
    "redact_secrets",
    "secret_spans",
]

REDACTED: Final = "[REDACTED]"


class SecretSpan(NamedTuple):
    """One recognised secret: `text[start:end]`, found by `rule` (a gitleaks id or a local name)."""

    start: int
    end: int
    rule: str


class _Source(NamedTuple):
    """A regex not compiled yet: the table is compiled on first use, so importing is cheap."""

    pattern: str
    flags: int = 0


class SecretPattern(NamedTuple):
    """One of memoryd's own rules (a Python `re` pattern, compiled on first use).

    With no capture group the whole match is the secret; otherwise the first group that took part
    in the match is, and the rest of the match is context that stays. The pattern only runs when
    one of `keywords` (lowercase) occurs in the lowercased text; no keywords means always.
    """

    name: str
    source: _Source
    keywords: tuple[str, ...]


# A token-shaped secret must not sit inside a longer identifier: `task-ant-...` is not a key.
_L: Final = r"(?<![A-Za-z0-9_\-])"
_R: Final = r"(?![A-Za-z0-9_\-])"


def _token(name: str, body: str, *keywords: str) -> SecretPattern:
    return SecretPattern(name, _Source(_L + body + _R), keywords)


# Words that name a secret at the end of a key: `api_key=`, `OPENAI_API_KEY:`, `"clientSecret":`.
_SECRET_WORDS: Final = (
    r"api[_\-]?key|apikey|secret|secret[_\-]?key|secret[_\-]?access[_\-]?key|access[_\-]?key"
    r"|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token|session[_\-]?token|bearer[_\-]?token"
    r"|client[_\-]?secret|private[_\-]?key|password|passwd|passphrase|token"
)

SECRET_PATTERNS: Final[tuple[SecretPattern, ...]] = (
    SecretPattern(
        # An unterminated block (a paste cut short) is redacted to the end of the text.
        "private_key_block",
        _Source(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
            r"[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)"
        ),
        ("-----begin",),
    ),
    SecretPattern(
        # The password runs to the LAST `@` of the authority, since passwords may contain `@`
        # (`mongodb+srv://app:p@ss@cluster0…`); the greedy class stops at `/` or whitespace.
        "url_password",
        _Source(r"\b[a-z][a-z0-9+.\-]{0,31}://[^\s/:@]+:([^\s/]+)@", re.IGNORECASE),
        ("://",),
    ),
    SecretPattern(
        "bearer_token",
        _Source(r"\bBearer\s+([A-Za-z0-9\-._~+/]{16,}=*)", re.IGNORECASE),
        ("bearer",),
    ),
    SecretPattern(
        # `Basic`/`Token` are ordinary words, so their credential must contain a digit.
        "auth_header",
        _Source(
            r"\b(?:Basic|Token)\s+((?=[A-Za-z\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{16,}=*)",
            re.IGNORECASE,
        ),
        ("basic", "token"),
    ),
    _token("anthropic_key", r"sk-ant-[A-Za-z0-9_\-]{16,}", "sk-ant-"),
    # Also OpenAI-compatible providers' `sk-…` keys (DeepSeek, OpenRouter's `sk-or-v1-…`).
    _token("openai_key", r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}", "sk-"),
    _token(
        "stripe_key",
        r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        *("sk_live_", "sk_test_", "rk_live_", "rk_test_"),
    ),
    _token("stripe_webhook_secret", r"whsec_[A-Za-z0-9+/=]{24,}", "whsec_"),
    _token(
        "github_token",
        r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _token(
        "aws_access_key_id",
        r"(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}",
        *("akia", "asia", "agpa", "aida", "aroa"),
    ),
    _token("slack_token", r"xox[bpars]-[A-Za-z0-9\-]{10,}", "xox"),
    SecretPattern(
        "slack_webhook",
        _Source(r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"),
        ("hooks.slack.com",),
    ),
    _token("google_api_key", r"AIza[0-9A-Za-z_\-]{35}", "aiza"),
    _token("google_oauth_client_secret", r"GOCSPX-[A-Za-z0-9_\-]{20,}", "gocspx-"),
    _token("google_oauth_access_token", r"ya29\.[A-Za-z0-9_\-]{20,}", "ya29."),
    _token("telegram_bot_token", r"\d{8,10}:AA[A-Za-z0-9_\-]{33}", ":aa"),
    SecretPattern(
        # user id (base64 of a snowflake) . timestamp . HMAC. No literal to gate on, so the
        # boundary check sits after the first character: the scan can then skip to [MNO].
        "discord_bot_token",
        _Source(
            r"[MNO](?<![A-Za-z0-9_\-][MNO])[A-Za-z0-9_\-]{23,27}"
            r"\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40}" + _R
        ),
        (),
    ),
    _token("groq_key", r"gsk_[A-Za-z0-9]{40,}", "gsk_"),
    _token("xai_key", r"xai-[A-Za-z0-9]{40,}", "xai-"),
    _token("replicate_token", r"r8_[A-Za-z0-9]{30,}", "r8_"),
    _token("langsmith_key", r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}", "lsv2_"),
    _token("pinecone_key", r"pcsk_[A-Za-z0-9]{4,8}_[A-Za-z0-9]{40,}", "pcsk_"),
    _token("tavily_key", r"tvly-(?:dev-|prod-)?[A-Za-z0-9]{24,}", "tvly-"),
    _token(
        "supabase_token",
        r"(?:sbp_[a-f0-9]{40}|sb_secret_[A-Za-z0-9_\-]{20,})",
        "sbp_",
        "sb_secret_",
    ),
    _token("doppler_token", r"dp\.(?:st|sa|ct|scim|audit)\.[A-Za-z0-9_.\-]{40,}", "dp."),
    _token("jwt", r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*", "eyj"),
    SecretPattern(
        # Azure Storage / Service Bus connection strings.
        "azure_connection_key",
        _Source(r"(?:AccountKey|SharedAccessKey)\s*=\s*([A-Za-z0-9+/]{20,}={0,2})"),
        ("accountkey", "sharedaccesskey"),
    ),
    SecretPattern(
        # A GCP service-account JSON: the key id is as sensitive as the key.
        "private_key_id",
        _Source(
            r"private[_\-]?key[_\-]?id[\"']?\s*[:=]\s*[\"']?([a-f0-9]{32,64})(?![a-f0-9])",
            re.IGNORECASE,
        ),
        ("key_id", "keyid", "key-id"),
    ),
    SecretPattern(
        # `api_key=…`, `OPENAI_API_KEY: …`, `"apiKey": "…"`, `password = '…'`. The key must END
        # with a secret word (`max_tokens=4000`, `token_count: 12` stay); where it starts does not
        # matter, so the pattern starts at the word and stays linear.
        "key_value",
        _Source(
            r"(?:" + _SECRET_WORDS + r")[\"']?\s*[:=]\s*"
            r"(?:\"((?!\[REDACTED)[^\"\n]{4,})\"|'((?!\[REDACTED)[^'\n]{4,})'"
            r"|(?![\"'\[])([^\s\"',;}]{5,}[^\s\"',;}.]))",
            re.IGNORECASE,
        ),
        ("key", "secret", "token", "passw", "passphrase"),
    ),
    SecretPattern(
        # "the root password is …", "password for the NAS was …". Unquoted, the value needs a
        # digit or a symbol: "the password is correct" is not a password.
        "prose_password",
        _Source(
            r"(?<![A-Za-z0-9])(?:password|passwd|passphrase|passcode)"
            r"(?:\s+(?:for|of|on|to)\s+(?:the\s+|my\s+|our\s+)?[\w.@\-]{1,64})?"
            r"\s+(?:is|was|:|=)\s+"
            r"(?:\"([^\"\n]{4,128})\"|'([^'\n]{4,128})'|`([^`\n]{4,128})`"
            r"|((?=\S{0,127}[0-9!#$%&*+=?@^~])[^\s\"'`\[]{5,127}[^\s\"'`.,;:?)\]]))",
            re.IGNORECASE,
        ),
        ("passw", "passphrase", "passcode"),
    ),
    SecretPattern(
        # "my Mistral key is …", "the AWS secret access key is …". The value must look
        # machine-made (`_looks_generated`): "the key is to keep it simple" stays.
        "prose_key",
        _Source(
            r"(?<![A-Za-z0-9])(?:key|token|secret|credential|pat)s?\s+(?:is|was|:|=)\s+"
            r"(?:\"([^\"\n]{16,256})\"|'([^'\n]{16,256})'|`([^`\n]{16,256})`"
            r"|([A-Za-z0-9_\-+/=.~]{15,511}[A-Za-z0-9_\-+/=~]))",
            re.IGNORECASE,
        ),
        ("key", "token", "secret", "credential", "pat"),
    ),
)

# A value that names or elides a secret rather than being one.
_PLACEHOLDER: Final = _Source(
    r"""\$\{?[A-Za-z_][A-Za-z0-9_]*\}?        # $VAR, ${VAR}
      | \{\{.*\}\} | %\(?[A-Za-z_]\w*\)?s?%?  # {{ template }}, %(var)s, %VAR%
      | <[^<>]*>                              # <your-api-key>
      | [A-Za-z_.]+[(\[].*                    # code: os.getenv(…), os.environ[…], Optional[str]
      | .*(?:\.\.\.|…)                        # sk-... (elided)
      | (.)\1*                                # xxxxxx, ******
    """,
    re.VERBOSE,
)


def _not_placeholder(value: str) -> bool:
    return re.compile(*_PLACEHOLDER).fullmatch(value) is None  # re caches the compiled form


def _looks_generated(value: str) -> bool:
    """Letters and digits, and mixed case or long: what a key generator emits, not prose."""
    has_digit = any(c.isdigit() for c in value)
    has_alpha = any(c.isalpha() for c in value)
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value)
    return has_digit and has_alpha and (mixed or len(value) >= 32) and _not_placeholder(value)


# The rules whose value is free-form; a match whose value fails its check is not a secret.
_VALUE_CHECKS: Final[dict[str, Callable[[str], bool]]] = {
    "key_value": _not_placeholder,
    "prose_password": _not_placeholder,
    "prose_key": _looks_generated,
}


# --- keywords: one scan of the text decides which rules run -------------------------------------


def _trie_regex(words: Iterable[str]) -> str:
    """An alternation matching the longest of `words` that starts at a position."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        ends = "" in node
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if ends:  # a shorter word ends here: the longer ones are tried first (greedy `?`)
            body = "(?:" + body + ")?"
        return body

    return build(trie)


class _Keywords:
    """Which of a fixed set of keywords occur in a lowercased text, found in one regex pass."""

    def __init__(self, words: Iterable[str]) -> None:
        vocabulary = sorted(set(words))
        # A lookahead finds a keyword at every position, overlaps included; only the longest at
        # each position is reported, so each one brings the keywords that are its prefixes.
        self._regex = re.compile("(?=(" + _trie_regex(vocabulary) + "))")
        self._prefixes = {w: tuple(p for p in vocabulary if w.startswith(p)) for w in vocabulary}

    def present(self, lowered: str) -> set[str]:
        found: set[str] = set()
        for word in set(self._regex.findall(lowered)):
            found.update(self._prefixes[word])
        return found


# --- gitleaks' ruleset on RE2 --------------------------------------------------------------------


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


@record
class _Rule:
    id: str
    regex: Any  # a compiled re2 bytes pattern (google-re2 ships no type information)
    groups: int
    secret_group: int
    entropy: float | None
    # Allowlists, each folded into one re2 str pattern (or None): searched in the secret (the
    # global allowlist included), the whole match, the secret's line; and lowercase stopwords,
    # any of which in the secret clears it (global ones included).
    allow_secret: Any
    allow_match: Any
    allow_line: Any
    stopwords: re.Pattern[str] | None


@record
class _Ruleset:
    rules: tuple[_Rule, ...]
    by_keyword: dict[str, tuple[int, ...]]  # lowercased keyword → indexes into rules
    always: tuple[int, ...]  # rules without keywords
    keywords: _Keywords  # gitleaks' and the local rules' keywords together


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
    glob_regexes: list[str] = list(glob.get("regexes", ()))
    glob_stopwords: list[str] = [w.lower() for w in glob.get("stopwords", ())]

    def any_of(patterns: list[str]) -> Any:
        # RE2 scopes inline flags to their group, so `(?:a)|(?:b)` means what a and b meant.
        return re2.compile("|".join(f"(?:{p})" for p in patterns)) if patterns else None

    glob_secret = any_of(glob_regexes)
    glob_stop = re.compile(_trie_regex(glob_stopwords)) if glob_stopwords else None
    rules: list[_Rule] = []
    by_keyword: dict[str, list[int]] = {}
    always: list[int] = []
    for spec in config["rules"]:
        if "regex" not in spec or "path" in spec:
            continue
        allow: dict[str, list[str]] = {"secret": [], "match": [], "line": []}
        stopwords: list[str] = []
        for allowlist in spec.get("allowlists", ()):
            if allowlist.get("condition") == "AND" and "paths" in allowlist:
                continue  # holds only together with a path, and a transcript has none
            allow[allowlist.get("regexTarget", "secret")].extend(allowlist.get("regexes", ()))
            stopwords.extend(w.lower() for w in allowlist.get("stopwords", ()))
        regex = re2.compile(spec["regex"].encode("utf-8"))
        index = len(rules)
        rules.append(
            _Rule(
                id=spec["id"],
                regex=regex,
                groups=regex.groups,
                secret_group=int(spec.get("secretGroup", 0)),
                entropy=spec.get("entropy"),
                allow_secret=any_of(glob_regexes + allow["secret"])
                if allow["secret"]
                else glob_secret,
                allow_match=any_of(allow["match"]),
                allow_line=any_of(allow["line"]),
                stopwords=re.compile(_trie_regex(glob_stopwords + stopwords))
                if stopwords
                else glob_stop,
            )
        )
        keywords = {k.lower() for k in spec.get("keywords", ())}
        for keyword in keywords:
            by_keyword.setdefault(keyword, []).append(index)
        if not keywords:
            always.append(index)
    local_keywords = (k for p in SECRET_PATTERNS for k in p.keywords)
    return _Ruleset(
        rules=tuple(rules),
        by_keyword={k: tuple(v) for k, v in by_keyword.items()},
        always=tuple(always),
        keywords=_Keywords([*by_keyword, *local_keywords]),
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
    """gitleaks' filters on the secret `text[start:end]` (of match `whole`): the entropy floor,
    then the allowlists (global and the rule's own)."""
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
        or (rule.stopwords is not None and rule.stopwords.search(secret.lower()) is not None)
    )


class _CharOffsets:
    """Byte offsets into UTF-8 `data` → offsets into `text`, for offsets that never decrease.

    RE2 spans fall on character boundaries, and one rule's matches come in order, so a forward
    sweep converts all of them in time linear in the text (ASCII text needs no conversion).
    """

    def __init__(self, text: str, data: bytes) -> None:
        self._data = data
        self._byte = 0
        self._char = 0

    def __call__(self, byte_offset: int) -> int:
        if byte_offset < self._byte:  # not expected; stay correct anyway
            self._byte = self._char = 0
        self._char += len(self._data[self._byte : byte_offset].decode("utf-8"))
        self._byte = byte_offset
        return self._char


def _gitleaks_spans(ruleset: _Ruleset, text: str, present: set[str]) -> list[SecretSpan]:
    candidates = set(ruleset.always)
    for keyword in present:
        candidates.update(ruleset.by_keyword.get(keyword, ()))
    if not candidates:
        return []
    # One encoding for every rule (google-re2 re-encodes a str on each call).
    data = text.encode("utf-8")
    ascii_only = len(data) == len(text)
    spans = []
    for index in sorted(candidates):
        rule = ruleset.rules[index]
        offset = _CharOffsets(text, data) if not ascii_only else None
        for match in rule.regex.finditer(data):
            group = rule.secret_group
            if group == 0 and rule.groups:
                group = next((g for g in range(1, rule.groups + 1) if match.group(g)), 0)
            if group > rule.groups or not match.group(group):
                continue
            bounds = (match.start(), match.start(group), match.end(group), match.end())
            first, start, end, last = bounds if offset is None else map(offset, bounds)
            if not _is_allowed(rule, text, start, end, text[first:last]):
                spans.append(SecretSpan(start, end, rule.id))
    return spans


# --- memoryd's rules --------------------------------------------------------------------------


@cache
def _local_rules() -> tuple[
    tuple[re.Pattern[str], ...], dict[str, tuple[int, ...]], tuple[int, ...]
]:
    """SECRET_PATTERNS compiled; keyword → indexes into it; the indexes that always run."""
    compiled = tuple(re.compile(*rule.source) for rule in SECRET_PATTERNS)
    by_keyword: dict[str, list[int]] = {}
    for index, rule in enumerate(SECRET_PATTERNS):
        for keyword in rule.keywords:
            by_keyword.setdefault(keyword, []).append(index)
    always = tuple(i for i, rule in enumerate(SECRET_PATTERNS) if not rule.keywords)
    return compiled, {k: tuple(v) for k, v in by_keyword.items()}, always


def _local_spans(text: str, present: set[str]) -> list[SecretSpan]:
    compiled, by_keyword, always = _local_rules()
    candidates = set(always)
    for keyword in present:
        candidates.update(by_keyword.get(keyword, ()))
    spans = []
    for index in sorted(candidates):
        name, pattern = SECRET_PATTERNS[index].name, compiled[index]
        check = _VALUE_CHECKS.get(name)
        for match in pattern.finditer(text):
            group = 0
            if pattern.groups:
                group = next(g for g in range(1, pattern.groups + 1) if match.start(g) >= 0)
            if check is not None and not check(match.group(group)):
                continue
            spans.append(SecretSpan(match.start(group), match.end(group), name))
    return spans


# --- the public surface -------------------------------------------------------------------------


def secret_spans(text: str) -> list[SecretSpan]:
    """Every secret found in `text` by either rule set, sorted, possibly overlapping."""
    if not text:
        return []
    ruleset = _ruleset()
    present = ruleset.keywords.present(text.lower())
    return sorted(_local_spans(text, present) + _gitleaks_spans(ruleset, text, present))


def _merge(spans: Sequence[SecretSpan]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end, _rule in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redact_secrets(text: str) -> str:
    """`text` with every recognised secret replaced by `[REDACTED]` (see the module docstring)."""
    spans = secret_spans(text)
    if not spans:
        return text
    out = []
    last = 0
    for start, end in _merge(spans):
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)
