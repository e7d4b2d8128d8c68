"""Checks on the value a rule matched: a placeholder, a word, a path or a quantity is no secret."""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Final

from ._rules import SecretSpan

# A value that names or elides a secret rather than being one.
_PLACEHOLDER: Final = r"""(?x)\$\{?[A-Za-z_][A-Za-z0-9_]*\}?        # $VAR, ${VAR}
      | \{\{.*\}\} | %\([A-Za-z_]\w*\)s | %[A-Za-z_]\w*%  # {{ template }}, %(var)s, %VAR%
      | <[^<>]*>                              # <your-api-key>
      | [A-Za-z_.]+[(\[].*                    # code: os.getenv(…), os.environ[…], Optional[str]
      | .*(?:\.\.\.|…)                        # sk-... (elided)
      | (.)\1*                                # xxxxxx, ******
    """


def _not_placeholder(value: str) -> bool:
    return re.fullmatch(_PLACEHOLDER, value) is None


def _mixed(value: str) -> bool:
    """Capitals, small letters and digits, as a generator or a password rule makes."""
    return (
        any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    )


def _looks_generated(value: str) -> bool:
    """Letters and digits, and mixed case or long: what a key generator emits, not prose."""
    long = len(value) >= 32 and any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
    return (_mixed(value) or long) and _not_placeholder(value)


# Trailing characters that end a sentence rather than a password typed in it.
_TRAILING: Final = ".,;:)]}>…"
_URL_OR_MAIL: Final = r"(?i)(?:[a-z][a-z0-9+.\-]*://|www\.)|^[\w.+-]+@[\w-]+\.[\w.]+$"
# "2,000m", "12.5%", "3x": a quantity, not a password
_QUANTITY: Final = r"(?i)\d[\d,.]*(?:[a-z%]{1,3})?"
_PATH: Final = r"(?:~|\.{1,2})?/[\w.\-/]*|[\w\-]+(?:/[\w\-.]+)+|[\w\-]+\.[a-z]{2,4}"


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    while end > start and text[end - 1] in _TRAILING:
        end -= 1
    return start, end


def _strength(value: str) -> tuple[bool, bool, bool, bool]:
    """(digit, letter, symbol other than an apostrophe, capital after a small letter)."""
    digit = any(c.isdigit() for c in value)
    letter = any(c.isalpha() for c in value)
    symbol = any(not c.isalnum() and c not in "'’" for c in value)
    inner_cap = any(a.islower() and b.isupper() for a, b in itertools.pairwise(value))
    return digit, letter, symbol, inner_cap


def _plausible_password(value: str, *, strict: bool) -> bool:
    """A value typed after "password is" that is one: not a word, a URL, a path or a quantity."""
    if len(value) < 4 or not _not_placeholder(value):
        return False
    if re.search(_URL_OR_MAIL, value) or re.fullmatch(_PATH, value):
        return False
    if value.startswith("//") or "REDACTED" in value:
        return False
    core = value.rstrip("!?")
    digit, letter, symbol, inner_cap = _strength(core)
    if not letter and digit:  # a number: a PIN-like password, unless it is a quantity
        return not strict and core.isdigit() and 4 <= len(core) <= 16
    if strict:
        if re.fullmatch(_QUANTITY, core):
            return False
        return letter and (digit or (symbol and len(core) >= 6))
    return digit or (symbol and len(core.strip("-")) >= 5) or inner_cap


_SHORT_WORDS: Final = frozenset({"pass", "pw", "pwd", "clave", "mdp"})


def _password_value(match: re.Match[str], group: int) -> tuple[int, int] | None:
    text = match.string
    start, end = match.span(group)
    if group != match.re.groups:  # quoted: whatever is between the quotes
        value = text[start:end]
        return (start, end) if _not_placeholder(value) and len(value.strip()) >= 4 else None
    start, end = _trimmed(text, start, end)
    word = (match.groupdict().get("word") or "").lower()
    strict = word in _SHORT_WORDS or "verb" in match.re.groupindex
    return (start, end) if _plausible_password(text[start:end], strict=strict) else None


def _value_first(match: re.Match[str], group: int) -> tuple[int, int] | None:
    start, end = _trimmed(match.string, *match.span(group))
    value = match.string[start:end]
    digit = any(c.isdigit() for c in value)
    # "Wi-Fi is the password …": a hyphen or a dot alone does not make a word a password
    symbol = any(not c.isalnum() and c not in "'’-." for c in value)
    ok = _plausible_password(value, strict=False) and (digit or symbol)
    return (start, end) if ok else None


def _pair_value(match: re.Match[str], group: int) -> tuple[int, int] | None:
    start, end = _trimmed(match.string, *match.span(group))
    ok = _plausible_password(match.string[start:end], strict=True)
    return (start, end) if ok else None


# Words opening a sentence about a passphrase, and function words no generated one uses.
_NOT_A_PHRASE: Final = frozenset(
    (
        "stored saved kept written set changed required needed missing wrong incorrect same"
        " different also still now just only long short weak strong hidden encrypted used given"
        " shared sent printed somewhere case very really being been never always easy hard what"
        " which where how why who when"
    ).split()
)
_FUNCTION_WORDS: Final = frozenset(
    (
        "the a an is are was were be to of in on at for with by from that this these those it its"
        " and or but not no we you i me my your our their he she they them his her as if so than"
        " then there here do does did has have had will would can could should"
    ).split()
)


def _phrase_value(match: re.Match[str], group: int) -> tuple[int, int] | None:
    words = match.group(group).lower().split()
    if words[0] in _NOT_A_PHRASE or any(w in _FUNCTION_WORDS for w in words):
        return None
    return match.span(group)


def _cli_value(match: re.Match[str], group: int) -> tuple[int, int] | None:
    start, end = match.span(group)
    value = match.string[start:end]
    if value.startswith(("$(", "`", "-", "<")) or not _not_placeholder(value) or len(value) < 3:
        return None
    return start, end


# Card networks' issuer prefixes: other digit runs are order numbers, timestamps, ISBNs.
_CARD_PREFIX: Final = r"4|5[0-9]|2[2-7]|3[0-9]|6[0-9]"


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = ord(ch) - 48
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_number(match: re.Match[str], group: int) -> tuple[int, int] | None:
    raw = match.group(group)
    digits = raw.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19 or not re.match(_CARD_PREFIX, digits):
        return None
    seps = {c for c in raw if c in " -"}
    if len(seps) > 1:
        return None
    if seps:
        groups = tuple(len(g) for g in re.split(r"[ -]", raw))
        if groups not in ((4, 4, 4, 4), (4, 6, 5), (4, 6, 4), (4, 4, 4, 4, 3), (4, 4, 4, 1)):
            return None
    if len(set(digits)) < 2 or not _luhn_ok(digits):
        return None
    return match.span(group)


# Base64 that is data, not a secret (images, PDF, archives, XML, SSH public keys, executables).
_DATA_PREFIXES: Final = tuple(
    "iVBORw0KGgo R0lGOD UklGR JVBERi0 H4sI UEsDB PD94bWwg PHN2Zy AAAA TVqQ Qk0 SUkq /9j/".split()
)


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


def _high_entropy(match: re.Match[str], group: int) -> tuple[int, int] | None:
    token = match.group(group)
    core = token.rstrip("=")
    if len(core) < 20 or core.startswith(_DATA_PREFIXES):
        return None
    if re.match(r"(?:sha(?:1|224|256|384|512)|md5)-", core):  # a digest (npm integrity)
        return None
    if not _mixed(core):
        return None
    if "/" in core:
        parts = core.split("/")
        # a path or a URL-ish run: its parts are words, each short and mostly letters
        if any(len(p) < 2 for p in parts) or all(p.isalpha() or len(p) < 6 for p in parts):
            return None
    # identifiers (`getElementsByTagName2`): long runs of small letters that random text lacks
    longest = max((len(r) for r in re.findall(r"[a-z]+", core)), default=0)
    if longest >= 7:
        return None
    # below this Shannon entropy, so many characters are not random enough to be a key
    if _entropy(core) < min(math.log2(len(core)) - 0.75, 4.6):
        return None
    return match.span(group)


# Checks of free-form values: (match, secret group) → the secret's span, or None if it is none.
_Check = Callable[[re.Match[str], int], "tuple[int, int] | None"]


_SHAPE_SYMBOLS: Final = frozenset("!#$%&+=?@^~")


def _password_shape(match: re.Match[str], group: int) -> tuple[int, int] | None:
    text = match.string
    start, end = match.span(group)
    while end > start and text[end - 1] in _TRAILING + "!?":
        end -= 1
    value = text[start:end]
    inner = value[1:-1]
    if not (8 <= len(value) <= 40 and any(c in _SHAPE_SYMBOLS for c in inner) and _mixed(value)):
        return None
    if any(c in "/\\()[]{}<>|*`" for c in value) or not _plausible_password(value, strict=True):
        return None
    name, eq, _rest = value.partition("=")
    if eq and re.fullmatch(r"[A-Z][A-Z0-9_]*|[a-z][a-z_.\-]*", name):
        return None  # an assignment (`OPENAI_API_KEY=…`): `key_value` and gitleaks judge those
    return start, match.end(group) if match.string[end : match.end(group)].strip(
        "!?"
    ) == "" else end


_VALUE_CHECKS: Final[dict[str, _Check]] = {
    "password_shape": _password_shape,
    "key_value": lambda m, g: m.span(g) if _not_placeholder(m.group(g)) else None,
    "prose_password": _password_value,
    "password_then_value": _password_value,
    "password_first": _value_first,
    "passphrase_words": _phrase_value,
    "credentials_pair": _pair_value,
    "default_user_pair": _pair_value,
    "cli_secret_flag": _cli_value,
    "cli_password_option": _cli_value,
    "curl_user": _cli_value,
    "prose_key": lambda m, g: m.span(g) if _looks_generated(m.group(g)) else None,
    "card_number": _card_number,
    "high_entropy_token": _high_entropy,
}


_ASKS_FOR_SECRET: Final = (
    r"(?i)(?:password|passwd|passphrase|passcode|\bpin\b|passwort|kennwort|mot de passe|\bmdp\b"
    r"|contrase[ñn]a|\bclave\b|senha|密码|密碼|口令|パスワード|暗証番号|비밀번호"
    r"|(?:door|gate|alarm|garage|safe|lock)\s+code)"
)
_QUESTION: Final = (
    r"(?i)[?？]|^\s*(?:what|whats|what's|which|tell|send|give|remind|share|need|do you|can you"
    r"|could you|wie|was|welche|quel|quelle|c'est quoi|dis|cuál|cual|dime|qual)\b"
    r"|多少|什么|是什么|何|教えて"
)
_ANSWER_TOKEN: Final = r"[!#-&(-~\u00a1-\u024f]+"
_NOT_AN_ANSWER: Final = frozenset(
    (
        "yes no nope sure idk dunno why what later sorry okay thanks same nothing none secret"
        " forgot unknown maybe hmm wait ask check later"
    ).split()
)


def _answer_spans(text: str, previous: str) -> list[SecretSpan]:
    """The password in `text` when it answers `previous`, a question about one."""
    if not (re.search(_ASKS_FOR_SECRET, previous) and re.search(_QUESTION, previous)):
        return []
    stripped = text.strip()
    if not stripped or len(stripped) > 200 or len(stripped.split()) > 12:
        return []
    spans = []
    tokens = [m for m in re.finditer(_ANSWER_TOKEN, text)]
    for m in tokens:
        start, end = _trimmed(text, *m.span())
        while start < end and text[start] in "([{<":
            start += 1
        value = text[start:end]
        if not value or value.lower() in _NOT_AN_ANSWER or "REDACTED" in value:
            continue
        digit, letter, symbol, inner_cap = _strength(value)
        if value.isdigit():
            ok = 4 <= len(value) <= 12
        else:
            ok = _plausible_password(value, strict=False) and (digit or symbol or inner_cap)
        alone = len(tokens) == 1 and text[: m.start()].strip() == "" and letter and len(value) >= 4
        if ok or (alone and _not_placeholder(value)):
            spans.append(SecretSpan(start, end, "answer_to_password_question"))
    words = stripped.lower().split()
    if (
        not spans
        and "phrase" in previous.lower()
        and 3 <= len(words) <= 12
        and all(w.isalpha() for w in words)
        and not any(w in _FUNCTION_WORDS for w in words)
    ):
        offset = text.index(stripped)
        spans.append(SecretSpan(offset, offset + len(stripped), "answer_to_password_question"))
    return spans
