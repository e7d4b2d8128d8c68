"""memoryd's own secret rules: formats gitleaks lacks, `key=value` forms and prose."""

from __future__ import annotations

import re
from typing import Final, NamedTuple


class SecretSpan(NamedTuple):
    """One recognised secret: `text[start:end]`, found by `rule` (a gitleaks id or a local name)."""

    start: int
    end: int
    rule: str


class SecretPattern(NamedTuple):
    """One of memoryd's own rules: a `re` pattern, compiled on first use so importing is cheap."""

    name: str
    pattern: str
    flags: int
    keywords: tuple[str, ...]
    #: For a rule without keywords: a cheap regex that must find something before it runs.
    prefilter: str | None = None


_L: Final = r"(?<![A-Za-z0-9_\-])"
_R: Final = r"(?![A-Za-z0-9_\-])"
_I: Final = re.IGNORECASE


def _rule(
    name: str, pattern: str, keywords: str | tuple[str, ...], flags: int = 0, prefilter: str = ""
) -> SecretPattern:
    """A rule from its regex; `keywords` a space-separated string unless one holds a space."""
    words = tuple(keywords.split()) if isinstance(keywords, str) else keywords
    return SecretPattern(name, pattern, flags, words, prefilter or None)


def _token(name: str, body: str, keywords: str) -> SecretPattern:
    """A token with a fixed prefix, standing alone between non-token characters."""
    return _rule(name, _L + body + _R, keywords)


# Words that name a secret at the end of a key: `api_key=`, `OPENAI_API_KEY:`, `"clientSecret":`.
_SECRET_WORDS: Final = (
    r"api[_\-]?key|apikey|secret|secret[_\-]?key|secret[_\-]?access[_\-]?key|access[_\-]?key"
    r"|access[_\-]?token|auth[_\-]?token|refresh[_\-]?token|session[_\-]?token|bearer[_\-]?token"
    r"|client[_\-]?secret|private[_\-]?key|password|passwd|passphrase|token"
)

# Password words in the languages people write to agents in; short ones need a stronger value.
_PASSWORD_WORDS: Final = (
    r"(?:wpa[23]?|wep|wi-?fi|wlan|network|wireless)[ \t-]+key"
    r"|(?:wi-?fi|wlan|network|access|entry|unlock|door|gate|alarm|garage|safe|lock|keypad)"
    r"[ \t-]+code"
    r"|passwords?|passwd|passphrase|passcode|pass|pwd|pw|passwort|kennwort|zugangscode"
    r"|mot[ \t]+de[ \t]+passe|mdp|contrase[ñn]a|clave|senha|wachtwoord|has[łl]o|пароль"
)
_PASSWORD_WORDS_CJK: Final = r"密码|密碼|口令|パスワード|暗証番号|비밀번호"
_PASSWORD_KEYWORDS: Final = (
    "mot de passe",
    *(
        "pass key pwd pw kennwort zugangscode mdp contraseña contrasena clave senha wachtwoord"
        " hasło haslo пароль 密码 密碼 口令 パスワード 暗証番号 비밀번호"
    ).split(),
)
# Words after the password word that say which one: "la contraseña nueva", "das neue"
_AFTER_WORD: Final = (
    r"nueva|nuevo|actual|temporal|nouveau|nouvelle|actuel|temporaire|provisoire|neu|neue"
    r"|aktuelle|new|old|current|temporary|default|initial|itself"
)
# Accounts every server has, so "root / …" is a login and its password.
_DEFAULT_USERS: Final = tuple(
    "root admin administrator pi ubuntu deploy postgres sa guest ec2-user oracle sysadmin"
    " superuser".split()
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
    # An unterminated block (a paste cut short) is redacted to the end of the text.
    _rule(
        "private_key_block",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
        r"[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
        "-----begin",
    ),
    # to the LAST `@` of the authority, as passwords may hold one (`mongodb+srv://app:p@ss@c…`)
    _rule("url_password", r"\b[a-z][a-z0-9+.\-]{0,31}://[^\s/:@]*:([^\s/]+)@", "://", _I),
    _rule("bearer_token", r"\bBearer\s+([A-Za-z0-9\-._~+/]{16,}=*)", "bearer", _I),
    # `Basic`/`Token` are ordinary words, so their credential must contain a digit.
    _rule(
        "auth_header",
        r"\b(?:Basic|Token)\s+((?=[A-Za-z\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{16,}=*)",
        "basic token",
        _I,
    ),
    _token("anthropic_key", r"sk-ant-[A-Za-z0-9_\-]{16,}", "sk-ant-"),
    # Also OpenAI-compatible providers' `sk-…` keys (DeepSeek, OpenRouter's `sk-or-v1-…`).
    _token("openai_key", r"sk-(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}", "sk-"),
    _token(
        "stripe_key",
        r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",
        "sk_live_ sk_test_ rk_live_ rk_test_",
    ),
    _token("stripe_webhook_secret", r"whsec_[A-Za-z0-9+/=]{24,}", "whsec_"),
    _token(
        "github_token",
        r"(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
        "ghp_ gho_ ghu_ ghs_ ghr_ github_pat_",
    ),
    _token(
        "aws_access_key_id", r"(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}", "akia asia agpa aida aroa"
    ),
    _token("slack_token", r"xox[bpars]-[A-Za-z0-9\-]{10,}", "xox"),
    _rule(
        "slack_webhook", r"https://hooks\.slack\.com/services/[A-Za-z0-9/_\-]+", "hooks.slack.com"
    ),
    _token("google_api_key", r"AIza[0-9A-Za-z_\-]{35}", "aiza"),
    _token("google_oauth_client_secret", r"GOCSPX-[A-Za-z0-9_\-]{20,}", "gocspx-"),
    _token("google_oauth_access_token", r"ya29\.[A-Za-z0-9_\-]{20,}", "ya29."),
    _token("telegram_bot_token", r"\d{8,10}:AA[A-Za-z0-9_\-]{33}", ":aa"),
    # id . timestamp . HMAC; the boundary check follows the first character so scans skip to [MNO]
    _rule(
        "discord_bot_token",
        r"[MNO](?<![A-Za-z0-9_\-][MNO])[A-Za-z0-9_\-]{23,27}"
        r"\.[A-Za-z0-9_\-]{6,7}\.[A-Za-z0-9_\-]{27,40}" + _R,
        "",
    ),
    _token("groq_key", r"gsk_[A-Za-z0-9]{40,}", "gsk_"),
    _token("xai_key", r"xai-[A-Za-z0-9]{40,}", "xai-"),
    _token("replicate_token", r"r8_[A-Za-z0-9]{30,}", "r8_"),
    _token("langsmith_key", r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}", "lsv2_"),
    _token("pinecone_key", r"pcsk_[A-Za-z0-9]{4,8}_[A-Za-z0-9]{40,}", "pcsk_"),
    _token("tavily_key", r"tvly-(?:dev-|prod-)?[A-Za-z0-9]{24,}", "tvly-"),
    _token(
        "supabase_token", r"(?:sbp_[a-f0-9]{40}|sb_secret_[A-Za-z0-9_\-]{20,})", "sbp_ sb_secret_"
    ),
    _token("doppler_token", r"dp\.(?:st|sa|ct|scim|audit)\.[A-Za-z0-9_.\-]{40,}", "dp."),
    # Vault 1.10+ service, batch and recovery tokens (`hvs.` + 24 characters, or longer)
    _token("vault_token", r"hv[sbr]\.[A-Za-z0-9_\-]{20,}", "hvs. hvb. hvr."),
    _token("jwt", r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*", "eyj"),
    # Azure Storage / Service Bus connection strings.
    _rule(
        "azure_connection_key",
        r"(?:AccountKey|SharedAccessKey)\s*=\s*([A-Za-z0-9+/]{20,}={0,2})",
        "accountkey sharedaccesskey",
    ),
    # A GCP service-account JSON: the key id is as sensitive as the key.
    _rule(
        "private_key_id",
        r"private[_\-]?key[_\-]?id[\"']?\s*[:=]\s*[\"']?([a-f0-9]{32,64})(?![a-f0-9])",
        "key_id keyid key-id",
        _I,
    ),
    # `api_key=…`, `"apiKey": "…"`: the key must END with a secret word (not `max_tokens=4000`)
    _rule(
        "key_value",
        r"(?:" + _SECRET_WORDS + r")[\"']?\s*[:=]\s*"
        r"(?:\"((?!\[REDACTED)[^\"\n]{4,})\"|'((?!\[REDACTED)[^'\n]{4,})'"
        r"|(?![\"'\[])([^\s\"',;}]{5,}[^\s\"',;}.]))",
        "key secret token passw passphrase",
        _I,
    ),
    # "the root password is …", "密码是…": the value needs a digit, symbol or inner capital
    _rule(
        "prose_password",
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
        _PASSWORD_KEYWORDS,
        _I,
    ),
    # "ssh in with password Zebra#2291q": no verb, so the value must look made up
    _rule(
        "password_then_value",
        r"(?<![A-Za-z0-9])(?P<word>passwor[dt]|kennwort|passphrase|contrase[ñn]a"
        r"|mot[ \t]+de[ \t]+passe)(?![A-Za-z])[ \t]+(?P<verb>)" + _VALUE,
        ("passw", "kennwort", "passphrase", "contraseña", "contrasena", "mot de passe"),
        _I,
    ),
    # "use Qwerty!7788 as the admin password": the value comes first
    _rule(
        "password_first",
        r"(?<!\S)(?!\[REDACTED\])(" + _VALUE_CHAR + r"{4,128}?)[ \t]+(?:is|as|for|was)[ \t]+"
        r"(?:the|my|our|your|his|her|their|an?)[ \t]+(?:[\w-]{1,24}[ \t]+){0,3}?"
        r"(?:password|passphrase|passcode|passwort|kennwort|pin)(?![A-Za-z])",
        "passw passphrase passcode kennwort pin",
        _I,
    ),
    # "the passphrase is purple monkey lantern orbit": words alone, no digit to tell it by
    _rule(
        "passphrase_words",
        r"(?<![A-Za-z])(?:passphrase|pass[ -]phrase|seed[ -]phrase|recovery[ -]phrase"
        r"|mnemonic)(?:[ \t]+(?:" + _OF + r")[ \t]+(?:[^\s:=,.]{1,40}[ \t]+){0,2}?"
        r"[^\s:=,.]{1,40})?(?:[ \t]*:[ \t]*|[ \t]+(?:is|was|ist|est|es)[ \t]+)"
        r"((?:[a-z]{2,12}[ \t]){2,23}[a-z]{2,12})(?![A-Za-z0-9])",
        ("passphrase", "pass phrase", "pass-phrase", "seed", "recovery", "mnemonic"),
        _I,
    ),
    # "my PIN is 4821", "SIM PIN: 123456", "the door code is 2580", "暗証番号は1234です"
    _rule(
        "pin_code",
        r"(?:(?<![A-Za-z0-9])(?:pin(?:[ -]?(?:code|number|no\.?|nr\.?))?|pincode|geheimzahl"
        r"|code[ \t]+(?:pin|secret|secreto)|(?:door|gate|alarm|garage|safe|lock|entry|access"
        r"|keypad|building|house|padlock|locker|unlock)[ \t]+code)(?![A-Za-z])"
        r"|PIN[码碼]|暗証番号|密码锁)"
        r"(?:[ \t]+(?:for|of|to|on|at|für|de|du|del|para)[ \t]+(?:the[ \t]+|my[ \t]+)?"
        r"[\w-]{1,24}(?:[ \t]+[\w-]{1,24}){0,2})?"
        r"(?:[ \t]*[:=＝：][ \t]*|[ \t]+(?:is|was|ist|lautet|est|es|c'est)[ \t]+(?::[ \t]*)?"
        r"|[ \t]*(?:是|为|は)[ \t]*|[ \t]+)(\d{4,8})(?![\d.,/:-]?\d)",
        "pin geheimzahl code 暗証番号 密码锁",
        _I,
    ),
    # a card's verification value next to its name: "cvv 417", "CVC: 123"
    _rule(
        "card_cvv",
        r"(?<![A-Za-z0-9])(?:cvv2?|cvc2?|csc|cid)(?![A-Za-z])[ \t]*(?:[:=][ \t]*|is[ \t]+)?"
        r"(\d{3,4})(?!\d)",
        "cvv cvc csc cid",
        _I,
    ),
    # "creds are admin:hunter2x", "wifi: MyNetwork / Copper2007#"
    _rule(
        "credentials_pair",
        r"(?<![A-Za-z0-9])(?:creds|credentials|login|logins|account|identifiants?|usuario"
        r"|benutzer(?:name)?|username|user|wi-?fi|wlan|ssid)(?:[ \t]+[^\s:/]{1,24}){0,3}?"
        r"(?:[ \t]+(?:are|is)|[ \t]*(?::|→|->))?[ \t]+"
        r"[\w.@+-]{1,64}(?::(?!//)|[ \t]*/[ \t]*)" + _VALUE,
        "cred login account identifiant usuario benutzer user wifi wi-fi wlan ssid",
        _I,
    ),
    # "root / cKZ1&Dw!0gBEHu": an account every server has, then a password
    _rule(
        "default_user_pair",
        r"(?<![\w/.-])(?:" + "|".join(_DEFAULT_USERS) + r")[ \t]*/[ \t]*" + _VALUE,
        tuple(f"{user}{sep}/" for user in _DEFAULT_USERS for sep in ("", " ")),
        _I,
    ),
    # `--password X`, `--admin-password=X`, `-storepass X`, `--token X`, `--api-key X`
    _rule(
        "cli_secret_flag",
        r"(?<![\w-])--?(?:[a-z0-9]+-)*(?:password|passwd|pwd|passphrase|storepass|keypass"
        r"|srcstorepass|deststorepass|secret|token|api-key|apikey|auth-token|access-token)"
        r"(?:=|[ \t]+)" + _CLI_VALUE,
        "-pass -pwd -secret -token -api -auth -access storepass keypass",
        _I,
    ),
    # tools whose short flag takes a password: `sshpass -p X`, `mysql -pX`, `redis-cli -a X`, …
    _rule(
        "cli_password_option",
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
        r"|\becho[ \t]+(?=\S+[ \t]*\|[ \t]*sudo[ \t]+(?:-\w+[ \t]+)*-S\b))" + _CLI_VALUE,
        (
            "sshpass mysql mariadb docker redis-cli sqlcmd bcp osql isql ldap zip 7z mongo"
            " pass: smbclient net htpasswd mysql_pwd rediscli_auth sudo"
        ),
    ),
    # `curl -u user:password`, `curl --user :token`
    _rule(
        "curl_user",
        r"\bcurl\b[^\n|;&]{0,300}?[ \t](?:-u|--user|--proxy-user|-U)(?:[ \t]+|=)?[\"']?"
        r"[^\s:\"']{0,64}:([^\s\"']{1,256})",
        "curl",
    ),
    # "my Mistral key is …": the value must look machine-made ("the key is to keep it simple")
    _rule(
        "prose_key",
        r"(?<![A-Za-z0-9])(?:key|token|secret|credential|pat)s?\s+(?:is|was|:|=)\s+"
        r"(?:\"([^\"\n]{16,256})\"|'([^'\n]{16,256})'|`([^`\n]{16,256})`"
        r"|([A-Za-z0-9_\-+/=.~]{15,511}[A-Za-z0-9_\-+/=~]))",
        "key token secret credential pat",
        _I,
    ),
    # "I use c0pp3r=Winter everywhere": the mixed shape password rules make people type
    _rule(
        "password_shape",
        r"(?<![^\s\"'`(\[{<「“])(?=[!#-&+-~]{0,39}[!#$%&+=?@^~])(?=[!#-&+-~]{0,39}\d)"
        r"[!#-&+-~]{8,40}(?=[\s\"'`)\]}>」”]|$)",
        "",
        0,
        r"[!#$%&+=?@^~]",
    ),
    # 13-19 digits; `_card_number` wants a network's prefix, card grouping and Luhn check digit
    _rule(
        "card_number",
        r"(?<![\w.\-/+])\d(?:[ \-]?\d){12,18}(?![\w\-/]|[.,]\d)",
        "",
        0,
        r"\d\d\d\d[ \-]?\d\d\d\d",
    ),
    # a bare generated token ("here you go: 9fK2…"): random text's entropy (`_high_entropy`)
    _rule(
        "high_entropy_token",
        r"(?<![A-Za-z0-9+/=_\-.~%@:#$&?\\])[A-Za-z0-9][A-Za-z0-9+/_\-]{18,}[A-Za-z0-9]"
        r"(?:={1,2})?(?![A-Za-z0-9+/=_\-~%@\\]|\.\w)",
        "",
        0,
        r"[A-Za-z0-9+/_\-]{20}",
    ),
)
