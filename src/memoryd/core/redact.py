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

import itertools
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Final, NamedTuple

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
    #: For a rule without keywords: a cheap regex that must find something before it runs.
    prefilter: _Source | None = None


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

# Words for a password in the languages people write to agents in (Latin script: matched as
# words; CJK: anywhere). Short ones (`pass`, `pw`, `clave`) need a stronger-looking value.
_PASSWORD_WORDS: Final = (
    r"(?:wpa[23]?|wep|wi-?fi|wlan|network|wireless)[ \t-]+key"
    r"|(?:wi-?fi|wlan|network|access|entry|unlock|door|gate|alarm|garage|safe|lock|keypad)"
    r"[ \t-]+code"
    r"|passwords?|passwd|passphrase|passcode|pass|pwd|pw|passwort|kennwort|zugangscode"
    r"|mot[ \t]+de[ \t]+passe|mdp|contrase[ñn]a|clave|senha|wachtwoord|has[łl]o|пароль"
)
_PASSWORD_WORDS_CJK: Final = r"密码|密碼|口令|パスワード|暗証番号|비밀번호"
_PASSWORD_KEYWORDS: Final = (
    "pass",
    "key",
    "pwd",
    "pw",
    "kennwort",
    "zugangscode",
    "mot de passe",
    "mdp",
    "contraseña",
    "contrasena",
    "clave",
    "senha",
    "wachtwoord",
    "hasło",
    "haslo",
    "пароль",
    "密码",
    "密碼",
    "口令",
    "パスワード",
    "暗証番号",
    "비밀번호",
)
# Words after the password word that say which one: "la contraseña nueva", "das neue"
_AFTER_WORD: Final = (
    r"nueva|nuevo|actual|temporal|nouveau|nouvelle|actuel|temporaire|provisoire|neu|neue"
    r"|aktuelle|new|old|current|temporary|default|initial|itself"
)
# Accounts every server has, so "root / …" is a login and its password.
_DEFAULT_USERS: Final = (
    "root",
    "admin",
    "administrator",
    "pi",
    "ubuntu",
    "deploy",
    "postgres",
    "sa",
    "guest",
    "ec2-user",
    "oracle",
    "sysadmin",
    "superuser",
)
# "the password FOR the staging db", "Kennwort FÜR den Router", "mot de passe DU wifi"
_OF: Final = r"for|of|on|to|at|in|from|with|für|fuer|vom|von|zum|zur|des|du|de|del|pour|para"
# "is", in the same languages (and "is now", "will be", "c'est")
_IS: Final = (
    # longest first: the first that fits wins, even when the value after it then fails
    r"(?:(?:is|was|has[ \t]+been|got|been)[ \t]+)?(?:re)?set[ \t]+to"
    r"|(?:(?:is|was|has[ \t]+been|got|been)[ \t]+)?changed[ \t]+to"
    r"|is(?:[ \t]+(?:now|still|just|literally|simply))?|was|will[ \t]+be|are|ist|lautet|war"
    r"|est|c'est|c’est|était|es|era|sera|é|wordt|to"
)
# One character of a password typed in prose: printable ASCII but quotes, and accented letters.
_VALUE_CHAR: Final = r"[!#-&(-_a-~\u00a1-\u024f]"
# A quoted value, or an unquoted run (trimmed and checked by `_password_value`).
_VALUE: Final = (
    r"(?:\"([^\"\n]{4,128})\"|'([^'\n]{4,128})'|`([^`\n]{4,128})`|「([^」\n]{4,128})」"
    r"|“([^”\n]{4,128})”|(?!\[REDACTED\])(" + _VALUE_CHAR + r"{4,128}))"
)
# A value on a command line: quoted, or up to the next blank or shell operator.
_CLI_VALUE: Final = (
    r"(?:'([^'\n]{1,256})'|\"([^\"\n]{1,256})\"|(?!\[REDACTED\])([^\s'\"|;&]{1,256}))"
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
        # The user may be empty (`redis://:pw@cache`).
        "url_password",
        _Source(r"\b[a-z][a-z0-9+.\-]{0,31}://[^\s/:@]*:([^\s/]+)@", re.IGNORECASE),
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
    # Vault 1.10+ service, batch and recovery tokens (`hvs.` + 24 characters, or longer)
    _token("vault_token", r"hv[sbr]\.[A-Za-z0-9_\-]{20,}", "hvs.", "hvb.", "hvr."),
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
        # "the root password is …", "das Passwort lautet …", "密码是…", "パスワードは…です",
        # "Password for jenkins: …", "Passwort …". The value's check (`_password_value`) wants
        # a digit, a symbol or a capital inside it: "the password is correct" stays.
        "prose_password",
        _Source(
            r"(?:(?<![A-Za-z0-9])(?P<word>" + _PASSWORD_WORDS + r")(?![A-Za-z])"
            r"|" + _PASSWORD_WORDS_CJK + r")"
            # "la contraseña nueva", "the password itself"
            r"(?:[ \t]+(?:" + _AFTER_WORD + r"))?"
            # what it is the password of: "for the staging db", "du wifi", ", if you need it,"
            r"(?:[ \t]+(?:" + _OF + r")[ \t]+(?:[^\s:=,.]{1,40}[ \t]+){0,3}?[^\s:=,.]{1,40}"
            r"|,[^,\n]{1,40},)?"
            r"(?:[ \t]*(?:[:=＝：?]|->|=>|→)[ \t]*"
            r"|[ \t]*,?[ \t]+(?:" + _IS + r")(?:[ \t]*:)?[ \t]+"
            r"|[ \t]*(?:是|为|為|は|が)[ \t]*)" + _VALUE,
            re.IGNORECASE,
        ),
        _PASSWORD_KEYWORDS,
    ),
    SecretPattern(
        # "Passwort Geheim123!x", "ssh in with password Zebra#2291q": no verb, so the value
        # must look made up (a letter and a digit, or a letter and a symbol)
        "password_then_value",
        _Source(
            r"(?<![A-Za-z0-9])(?P<word>passwor[dt]|kennwort|passphrase|contrase[ñn]a"
            r"|mot[ \t]+de[ \t]+passe)(?![A-Za-z])[ \t]+(?P<verb>)" + _VALUE,
            re.IGNORECASE,
        ),
        ("passw", "kennwort", "passphrase", "contraseña", "contrasena", "mot de passe"),
    ),
    SecretPattern(
        # "use Qwerty!7788 as the admin password", "Zebra#2291q is the password for the guest
        # network": the value comes first.
        "password_first",
        _Source(
            r"(?<!\S)(?!\[REDACTED\])(" + _VALUE_CHAR + r"{4,128}?)[ \t]+(?:is|as|for|was)[ \t]+"
            r"(?:the|my|our|your|his|her|their|an?)[ \t]+(?:[\w-]{1,24}[ \t]+){0,3}?"
            r"(?:password|passphrase|passcode|passwort|kennwort|pin)(?![A-Za-z])",
            re.IGNORECASE,
        ),
        ("passw", "passphrase", "passcode", "kennwort", "pin"),
    ),
    SecretPattern(
        # "the passphrase is purple monkey lantern orbit": words alone, no digit to tell it by
        "passphrase_words",
        _Source(
            r"(?<![A-Za-z])(?:passphrase|pass[ -]phrase|seed[ -]phrase|recovery[ -]phrase"
            r"|mnemonic)(?:[ \t]+(?:" + _OF + r")[ \t]+(?:[^\s:=,.]{1,40}[ \t]+){0,2}?"
            r"[^\s:=,.]{1,40})?(?:[ \t]*:[ \t]*|[ \t]+(?:is|was|ist|est|es)[ \t]+)"
            r"((?:[a-z]{2,12}[ \t]){2,23}[a-z]{2,12})(?![A-Za-z0-9])",
            re.IGNORECASE,
        ),
        ("passphrase", "pass phrase", "pass-phrase", "seed", "recovery", "mnemonic"),
    ),
    SecretPattern(
        # "my PIN is 4821", "SIM PIN: 123456", "the door code is 2580", "暗証番号は1234です"
        "pin_code",
        _Source(
            r"(?:(?<![A-Za-z0-9])(?:pin(?:[ -]?(?:code|number|no\.?|nr\.?))?|pincode|geheimzahl"
            r"|code[ \t]+(?:pin|secret|secreto)|(?:door|gate|alarm|garage|safe|lock|entry|access"
            r"|keypad|building|house|padlock|locker|unlock)[ \t]+code)(?![A-Za-z])"
            r"|PIN[码碼]|暗証番号|密码锁)"
            r"(?:[ \t]+(?:for|of|to|on|at|für|de|du|del|para)[ \t]+(?:the[ \t]+|my[ \t]+)?"
            r"[\w-]{1,24}(?:[ \t]+[\w-]{1,24}){0,2})?"
            r"(?:[ \t]*[:=＝：][ \t]*|[ \t]+(?:is|was|ist|lautet|est|es|c'est)[ \t]+(?::[ \t]*)?"
            r"|[ \t]*(?:是|为|は)[ \t]*|[ \t]+)(\d{4,8})(?![\d.,/:-]?\d)",
            re.IGNORECASE,
        ),
        (
            "pin",
            "geheimzahl",
            "code",
            "暗証番号",
            "密码锁",
        ),
    ),
    SecretPattern(
        # a card's verification value next to its name: "cvv 417", "CVC: 123"
        "card_cvv",
        _Source(
            r"(?<![A-Za-z0-9])(?:cvv2?|cvc2?|csc|cid)(?![A-Za-z])[ \t]*(?:[:=][ \t]*|is[ \t]+)?"
            r"(\d{3,4})(?!\d)",
            re.IGNORECASE,
        ),
        ("cvv", "cvc", "csc", "cid"),
    ),
    SecretPattern(
        # "creds are admin:hunter2x", "Netflix login is me@example.com / Zebra#2291q",
        # "wifi: MyNetwork / Copper2007#", "login for the CMS → admin / …"
        "credentials_pair",
        _Source(
            r"(?<![A-Za-z0-9])(?:creds|credentials|login|logins|account|identifiants?|usuario"
            r"|benutzer(?:name)?|username|user|wi-?fi|wlan|ssid)(?:[ \t]+[^\s:/]{1,24}){0,3}?"
            r"(?:[ \t]+(?:are|is)|[ \t]*(?::|→|->))?[ \t]+"
            r"[\w.@+-]{1,64}(?::(?!//)|[ \t]*/[ \t]*)" + _VALUE,
            re.IGNORECASE,
        ),
        (
            "cred",
            "login",
            "account",
            "identifiant",
            "usuario",
            "benutzer",
            "user",
            "wifi",
            "wi-fi",
            "wlan",
            "ssid",
        ),
    ),
    SecretPattern(
        # "root / cKZ1&Dw!0gBEHu", "admin/Monkey2014!": an account every server has, then a
        # password
        "default_user_pair",
        _Source(
            r"(?<![\w/.-])(?:" + "|".join(_DEFAULT_USERS) + r")[ \t]*/[ \t]*" + _VALUE,
            re.IGNORECASE,
        ),
        tuple(f"{user}{sep}/" for user in _DEFAULT_USERS for sep in ("", " ")),
    ),
    SecretPattern(
        # `--password X`, `--admin-password=X`, `-storepass X`, `--token X`, `--api-key X`
        "cli_secret_flag",
        _Source(
            r"(?<![\w-])--?(?:[a-z0-9]+-)*(?:password|passwd|pwd|passphrase|storepass|keypass"
            r"|srcstorepass|deststorepass|secret|token|api-key|apikey|auth-token|access-token)"
            r"(?:=|[ \t]+)" + _CLI_VALUE,
            re.IGNORECASE,
        ),
        ("-pass", "-pwd", "-secret", "-token", "-api", "-auth", "-access", "storepass", "keypass"),
    ),
    SecretPattern(
        # tools whose short flag takes a password: `sshpass -p X`, `mysql -pX`, `docker login -p X`,
        # `redis-cli -a X`, `sqlcmd -P X`, `ldapsearch -w X`, `zip -P X`, `7z -pX`
        "cli_password_option",
        _Source(
            r"(?:\bsshpass(?:[ \t]+-[a-oq-zA-Z]\S*)*[ \t]+-p[ \t]*"
            r"|\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mariadb"
            r"|mariadb-dump)\b[^\n|;&]{0,300}?[ \t]-p(?=\S)"
            r"|\bdocker[ \t]+login\b[^\n|;&]{0,300}?[ \t]-p[ \t]+"
            r"|\bredis-cli\b[^\n|;&]{0,300}?[ \t]-a[ \t]+"
            r"|\b(?:sqlcmd|bcp|osql|isql)\b[^\n|;&]{0,300}?[ \t]-P[ \t]*"
            r"|\bldap[a-z]*\b[^\n|;&]{0,300}?[ \t]-w[ \t]+"
            r"|\bzip\b[^\n|;&]{0,300}?[ \t]-P[ \t]+"
            r"|\b7za?\b[^\n|;&]{0,300}?[ \t]-p(?=\S)"
            r"|\bmongo(?:sh)?\b[^\n|;&]{0,300}?[ \t]-p[ \t]+"
            r"|-pass(?:in|out)?[ \t]+pass:"
            r"|\bsmbclient\b[^\n|;&]{0,300}?[ \t](?:-U[ \t]*|--user[= ])[^\s%]{1,64}%"
            r"|\bnet[ \t]+use\b[^\n|;&]{0,300}?/user:\S+[ \t]+"
            r"|\bhtpasswd[ \t]+-[a-zA-Z]*b[a-zA-Z]*[ \t]+(?:-\S+[ \t]+)*\S+[ \t]+\S+[ \t]+"
            r"|\b(?:MYSQL_PWD|SSHPASS|REDISCLI_AUTH)="
            r"|\becho[ \t]+(?=\S+[ \t]*\|[ \t]*sudo[ \t]+(?:-\w+[ \t]+)*-S\b))" + _CLI_VALUE
        ),
        (
            "sshpass",
            "mysql",
            "mariadb",
            "docker",
            "redis-cli",
            "sqlcmd",
            "bcp",
            "osql",
            "isql",
            "ldap",
            "zip",
            "7z",
            "mongo",
            "pass:",
            "smbclient",
            "net",
            "htpasswd",
            "mysql_pwd",
            "rediscli_auth",
            "sudo",
        ),
    ),
    SecretPattern(
        # `curl -u user:password`, `curl --user :token`
        "curl_user",
        _Source(
            r"\bcurl\b[^\n|;&]{0,300}?[ \t](?:-u|--user|--proxy-user|-U)(?:[ \t]+|=)?[\"']?"
            r"[^\s:\"']{0,64}:([^\s\"']{1,256})"
        ),
        ("curl",),
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
    SecretPattern(
        # "I use c0pp3r=Winter everywhere": no word says it, but a word with a capital, a small
        # letter, a digit and a symbol inside it is what password rules make people type
        "password_shape",
        _Source(
            r"(?<![^\s\"'`(\[{<「“])(?=[!#-&+-~]{0,39}[!#$%&+=?@^~])(?=[!#-&+-~]{0,39}\d)"
            r"[!#-&+-~]{8,40}(?=[\s\"'`)\]}>」”]|$)"
        ),
        (),
        _Source(r"[!#$%&+=?@^~]"),
    ),
    SecretPattern(
        # 13-19 digits, bare or in groups of 4 (Amex 4-6-5); `_card_number` wants a card
        # network's prefix, the grouping cards are printed with, and a right Luhn check digit
        "card_number",
        _Source(r"(?<![\w.\-/+])\d(?:[ \-]?\d){12,18}(?![\w\-/]|[.,]\d)"),
        (),
        _Source(r"\d\d\d\d[ \-]?\d\d\d\d"),
    ),
    SecretPattern(
        # A generated token with no word near it ("here you go: 9fK2…", a bare AWS secret key):
        # detect-secrets' idea, a long run of token characters whose Shannon entropy is that of
        # random text (`_high_entropy`). URLs, file paths and data blobs are left alone.
        "high_entropy_token",
        _Source(
            r"(?<![A-Za-z0-9+/=_\-.~%@:#$&?\\])[A-Za-z0-9][A-Za-z0-9+/_\-]{18,}[A-Za-z0-9]"
            r"(?:={1,2})?(?![A-Za-z0-9+/=_\-~%@\\]|\.\w)"
        ),
        (),
        _Source(r"[A-Za-z0-9+/_\-]{20}"),
    ),
)

# A value that names or elides a secret rather than being one.
_PLACEHOLDER: Final = _Source(
    r"""\$\{?[A-Za-z_][A-Za-z0-9_]*\}?        # $VAR, ${VAR}
      | \{\{.*\}\} | %\([A-Za-z_]\w*\)s | %[A-Za-z_]\w*%  # {{ template }}, %(var)s, %VAR%
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


# Trailing characters that end a sentence rather than a password typed in it.
_TRAILING: Final = ".,;:)]}>…"
_URL_OR_MAIL: Final = _Source(r"(?:[a-z][a-z0-9+.\-]*://|www\.)|^[\w.+-]+@[\w-]+\.[\w.]+$", re.I)
# "2,000m", "12.5%", "3x": a quantity, not a password
_QUANTITY: Final = _Source(r"\d[\d,.]*(?:[a-z%]{1,3})?", re.IGNORECASE)
_PATH: Final = _Source(r"(?:~|\.{1,2})?/[\w.\-/]*|[\w\-]+(?:/[\w\-.]+)+|[\w\-]+\.[a-z]{2,4}")


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
    """A value typed after "password is" that is one: not a word, a URL, a path or a quantity.

    `strict` (no verb in between, or a short key word such as "pass"): it needs a letter and a
    digit, or a letter and a symbol in 6 characters or more.
    """
    if len(value) < 4 or not _not_placeholder(value):
        return False
    if re.compile(*_URL_OR_MAIL).search(value) or re.compile(*_PATH).fullmatch(value):
        return False
    if value.startswith("//") or "REDACTED" in value:
        return False
    core = value.rstrip("!?")
    digit, letter, symbol, inner_cap = _strength(core)
    if not letter and digit:  # a number: a PIN-like password, unless it is a quantity
        return not strict and core.isdigit() and 4 <= len(core) <= 16
    if strict:
        if re.compile(*_QUANTITY).fullmatch(core):
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
    digit, _letter, symbol, _cap = _strength(value)
    # "Wi-Fi is the password …": a hyphen or a dot alone does not make a word a password
    symbol = any(not c.isalnum() and c not in "'’-." for c in value)
    ok = _plausible_password(value, strict=False) and (digit or symbol)
    return (start, end) if ok else None


def _pair_value(match: re.Match[str], group: int) -> tuple[int, int] | None:
    start, end = _trimmed(match.string, *match.span(group))
    ok = _plausible_password(match.string[start:end], strict=True)
    return (start, end) if ok else None


# Words that start a sentence about a passphrase rather than the passphrase itself; and the
# small words of every English sentence, which a generated passphrase does not use.
_NOT_A_PHRASE: Final = frozenset(
    [
        "stored",
        "saved",
        "kept",
        "written",
        "set",
        "changed",
        "required",
        "needed",
        "missing",
        "wrong",
        "incorrect",
        "same",
        "different",
        "also",
        "still",
        "now",
        "just",
        "only",
        "long",
        "short",
        "weak",
        "strong",
        "hidden",
        "encrypted",
        "used",
        "given",
        "shared",
        "sent",
        "printed",
        "somewhere",
        "case",
        "very",
        "really",
        "being",
        "been",
        "never",
        "always",
        "easy",
        "hard",
        "what",
        "which",
        "where",
        "how",
        "why",
        "who",
        "when",
    ]
)
_FUNCTION_WORDS: Final = frozenset(
    [
        "the",
        "a",
        "an",
        "is",
        "are",
        "was",
        "were",
        "be",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "from",
        "that",
        "this",
        "these",
        "those",
        "it",
        "its",
        "and",
        "or",
        "but",
        "not",
        "no",
        "we",
        "you",
        "i",
        "me",
        "my",
        "your",
        "our",
        "their",
        "he",
        "she",
        "they",
        "them",
        "his",
        "her",
        "as",
        "if",
        "so",
        "than",
        "then",
        "there",
        "here",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "will",
        "would",
        "can",
        "could",
        "should",
    ]
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


# Issuer prefixes of the card networks (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay,
# Maestro): a run of digits that starts otherwise is an order number, a timestamp, an ISBN.
_CARD_PREFIX: Final = _Source(r"4|5[0-9]|2[2-7]|3[0-9]|6[0-9]")


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
    if not 13 <= len(digits) <= 19 or not re.compile(*_CARD_PREFIX).match(digits):
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


# Base64 that is data, not a secret: PNG, JPEG, GIF, WebP, PDF, gzip, zip, XML/SVG, an SSH
# public key's body (`AAAA…`), a Windows executable.
_DATA_PREFIXES: Final = (
    "iVBORw0KGgo",
    "R0lGOD",
    "UklGR",
    "JVBERi0",
    "H4sI",
    "UEsDB",
    "PD94bWwg",
    "PHN2Zy",
    "AAAA",
    "TVqQ",
    "Qk0",
    "SUkq",
    "/9j/",
)


def _entropy_floor(n: int) -> float:
    """The Shannon entropy below which `n` token characters are not random enough to be a key.

    A random string over the 62 alphanumerics reaches about log2(n) - 0.3 bits per character
    while n is well below 62 (few repeats), and about 5.4 bits past it; identifiers, words and
    paths of the same length stay a bit or more below (tuned on the ordinary-text corpus, with
    a margin: tests/test_redact.py).
    """
    return min(math.log2(n) - 0.75, 4.6)


def _high_entropy(match: re.Match[str], group: int) -> tuple[int, int] | None:
    token = match.group(group)
    core = token.rstrip("=")
    if len(core) < 20 or core.startswith(_DATA_PREFIXES):
        return None
    if re.match(r"(?:sha(?:1|224|256|384|512)|md5)-", core):  # a digest (npm integrity)
        return None
    if not (
        any(c.isupper() for c in core)
        and any(c.islower() for c in core)
        and any(c.isdigit() for c in core)
    ):
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
    if _entropy(core) < _entropy_floor(len(core)):
        return None
    return match.span(group)


# The rules whose value is free-form; a match whose value fails its check is not a secret. A
# check gets the match and the secret's group, and returns the secret's span (maybe trimmed).
_Check = Callable[[re.Match[str], int], "tuple[int, int] | None"]


def _plain(check: Callable[[str], bool]) -> _Check:
    def run(match: re.Match[str], group: int) -> tuple[int, int] | None:
        return match.span(group) if check(match.group(group)) else None

    return run


_SHAPE_SYMBOLS: Final = frozenset("!#$%&+=?@^~")


def _password_shape(match: re.Match[str], group: int) -> tuple[int, int] | None:
    text = match.string
    start, end = match.span(group)
    while end > start and text[end - 1] in _TRAILING + "!?":
        end -= 1
    value = text[start:end]
    inner = value[1:-1]
    if not (
        8 <= len(value) <= 40
        and any(c in _SHAPE_SYMBOLS for c in inner)
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
        and any(c.isdigit() for c in value)
    ):
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
    "key_value": _plain(_not_placeholder),
    "prose_password": _password_value,
    "password_then_value": _password_value,
    "password_first": _value_first,
    "passphrase_words": _phrase_value,
    "credentials_pair": _pair_value,
    "default_user_pair": _pair_value,
    "cli_secret_flag": _cli_value,
    "cli_password_option": _cli_value,
    "curl_user": _cli_value,
    "prose_key": _plain(_looks_generated),
    "card_number": _card_number,
    "high_entropy_token": _high_entropy,
}


# --- answers to a question about a password ---------------------------------------------------

_ASKS_FOR_SECRET: Final = _Source(
    r"(?:password|passwd|passphrase|passcode|\bpin\b|passwort|kennwort|mot de passe|\bmdp\b"
    r"|contrase[ñn]a|\bclave\b|senha|密码|密碼|口令|パスワード|暗証番号|비밀번호"
    r"|(?:door|gate|alarm|garage|safe|lock)\s+code)",
    re.IGNORECASE,
)
_QUESTION: Final = _Source(
    r"[?？]|^\s*(?:what|whats|what's|which|tell|send|give|remind|share|need|do you|can you"
    r"|could you|wie|was|welche|quel|quelle|c'est quoi|dis|cuál|cual|dime|qual)\b"
    r"|多少|什么|是什么|何|教えて",
    re.IGNORECASE,
)
_ANSWER_TOKEN: Final = _Source(r"[!#-&(-~\u00a1-\u024f]+")
_NOT_AN_ANSWER: Final = frozenset(
    [
        "yes",
        "no",
        "nope",
        "sure",
        "idk",
        "dunno",
        "why",
        "what",
        "later",
        "sorry",
        "okay",
        "thanks",
        "same",
        "nothing",
        "none",
        "secret",
        "forgot",
        "unknown",
        "maybe",
        "hmm",
        "wait",
        "ask",
        "check",
        "later",
    ]
)


def _answer_spans(text: str, previous: str) -> list[SecretSpan]:
    """The password in `text` when it answers `previous`, a question about one.

    A short reply only (at most 12 words): its words that look like a password, its only
    word when it is nothing else, or the whole reply when a passphrase was asked for.
    """
    if not (
        re.compile(*_ASKS_FOR_SECRET).search(previous) and re.compile(*_QUESTION).search(previous)
    ):
        return []
    stripped = text.strip()
    if not stripped or len(stripped) > 200 or len(stripped.split()) > 12:
        return []
    spans = []
    tokens = [m for m in re.compile(*_ANSWER_TOKEN).finditer(text)]
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


def _re2() -> Any:
    """Google's RE2 binding, imported on first use (it ships no type information)."""
    import re2  # type: ignore[import-untyped]

    return re2


class _Keywords:
    """Which of a fixed set of keywords occur in a lowercased text, found in one pass.

    An RE2 set of the literal keywords: one automaton over the text, however many keywords
    there are (a regex alternation tried at every position grew slower with every short one).
    """

    def __init__(self, words: Iterable[str]) -> None:
        re2 = _re2()
        self._vocabulary = sorted(set(words))
        self._set = re2.Set.SearchSet()
        for word in self._vocabulary:
            self._set.Add(re.escape(word))
        self._set.Compile()

    def present(self, lowered: str) -> set[str]:
        hits = self._set.Match(lowered)
        return {self._vocabulary[i] for i in hits} if hits else set()


# --- gitleaks' ruleset on RE2 --------------------------------------------------------------------


def _entropy(value: str) -> float:
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values()) if n else 0.0


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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

    re2 = _re2()

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
    for rule in SECRET_PATTERNS:
        if rule.prefilter is not None:
            re.compile(*rule.prefilter)  # cached by `re` for `_local_spans`
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
        rule, pattern = SECRET_PATTERNS[index], compiled[index]
        if rule.prefilter is not None and not re.compile(*rule.prefilter).search(text):
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


# --- the public surface -------------------------------------------------------------------------


def secret_spans(text: str, *, previous: str | None = None) -> list[SecretSpan]:
    """Every secret found in `text` by either rule set, sorted, possibly overlapping.

    `previous` is the message `text` replies to: when it asks for a password, a short reply's
    password-like words are secrets too ("what's the root password?" → "hunter2x").
    """
    if not text:
        return []
    ruleset = _ruleset()
    present = ruleset.keywords.present(text.lower())
    spans = _local_spans(text, present) + _gitleaks_spans(ruleset, text, present)
    if previous:
        spans += _answer_spans(text, previous)
    return sorted(spans)


def _merge(spans: Sequence[SecretSpan]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end, _rule in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def redact_secrets(text: str, *, previous: str | None = None) -> str:
    """`text` with every recognised secret replaced by `[REDACTED]` (see the module docstring);
    `previous`, the message it replies to, as in `secret_spans`."""
    spans = secret_spans(text, previous=previous)
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
