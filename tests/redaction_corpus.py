"""Redaction corpora: secret formats that must vanish, and ordinary notes that must stay untouched.

`SECRET_CASES` holds one message per secret format, written the way it turns up in an agent's
transcript (pasted config, an env line, a header, a sentence). Every value is synthetic: drawn at
import time from a seeded generator in the format's real alphabet and length, so no secret-shaped
literal sits in the repository and every run sees the same values. A case passes only when no
fragment of any of its values survives (`leaked_fragments`) and its context words do.

The innocent side is real prose (LoCoMo dialogue turns, Cranfield abstracts, the demo workspace)
plus `DEVELOPER_NOTES`, hand-picked look-alikes: hashes, UUIDs, versions, token counts, public keys,
base64 in docs, placeholders and URLs without passwords.

Shared by `tests/test_redact.py` and `bench/bench_redact.py`.
"""

from __future__ import annotations

import json
import os
import random
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEMORYD_SHARED_DIR") or REPO.parent / "shared")

_rng = random.Random(20261201)

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
HEX = "0123456789abcdef"
B64URL = ALNUM + "-_"
B64 = ALNUM + "+/"
BECH32 = "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L"


def rnd(alphabet: str, n: int) -> str:
    """`n` characters of `alphabet`, containing at least one letter and one digit when it has both."""
    while True:
        out = "".join(_rng.choice(alphabet) for _ in range(n))
        needs_digit = any(c.isdigit() for c in alphabet) and n >= 8
        needs_alpha = any(c.isalpha() for c in alphabet) and n >= 8
        if (not needs_digit or any(c.isdigit() for c in out)) and (
            not needs_alpha or any(c.isalpha() for c in out)
        ):
            return out


@dataclass(frozen=True)
class SecretCase:
    name: str
    text: str  # the message as an agent would see it
    secrets: tuple[str, ...]  # every value that must vanish, whole
    keep: tuple[str, ...] = ()  # context that must survive so the sentence still reads


def _pem(kind: str, lines: int = 6, *, escaped: bool = False) -> tuple[str, str]:
    """A PEM private-key block (body base64) and its body; `escaped` writes JSON-style `\\n`."""
    body_lines = [rnd(B64, 64) for _ in range(lines)]
    nl = "\\n" if escaped else "\n"
    begin, end = f"-----BEGIN {kind}-----", f"-----END {kind}-----"
    return nl.join([begin, *body_lines, end]), "".join(body_lines)


def _cases() -> list[SecretCase]:
    c: list[SecretCase] = []

    def add(name: str, text: str, *secrets: str, keep: tuple[str, ...] = ()) -> None:
        c.append(SecretCase(name, text, secrets, keep))

    # --- AI providers (what agents paste most) --------------------------------------------------
    v = "sk-proj-" + rnd(B64URL, 74) + "T3BlbkFJ" + rnd(B64URL, 74)
    add(
        "openai-project-key", f"Use this OpenAI key: {v} for the eval run.", v, keep=("OpenAI key",)
    )
    v = "sk-" + rnd(ALNUM, 20) + "T3BlbkFJ" + rnd(ALNUM, 20)
    add("openai-legacy-key", f"old key {v} still works", v, keep=("old key", "still works"))
    v = "sk-svcacct-" + rnd(B64URL, 58) + "T3BlbkFJ" + rnd(B64URL, 58)
    add("openai-service-account-key", f"service account {v}", v, keep=("service account",))
    v = "sk-ant-api03-" + rnd(B64URL, 93) + "AA"
    add("anthropic-api-key", f"ANTHROPIC_API_KEY={v}", v, keep=("ANTHROPIC_API_KEY=",))
    v = "sk-ant-admin01-" + rnd(B64URL, 93) + "AA"
    add("anthropic-admin-key", f"the admin key {v} can create workspaces", v)
    v = rnd(ALNUM, 32)
    add(
        "mistral-key-in-prose",
        f"my Mistral key is {v} if you need it",
        v,
        keep=("my Mistral key is",),
    )
    v = "gsk_" + rnd(ALNUM, 52)
    add("groq-key", f"Groq works: {v}", v, keep=("Groq works:",))
    v = "hf_" + rnd(string.ascii_letters, 34)
    add(
        "huggingface-token",
        f"huggingface-cli login --token {v}",
        v,
        keep=("huggingface-cli login",),
    )
    v = "xai-" + rnd(ALNUM, 80)
    add("xai-key", f"Grok key {v}", v)
    v = "pplx-" + rnd(ALNUM, 48)
    add("perplexity-key", f"perplexity: {v}", v)
    v = "r8_" + rnd(ALNUM, 37)
    add("replicate-token", f"export REPLICATE_API_TOKEN={v}", v, keep=("REPLICATE_API_TOKEN=",))
    v = "sk-or-v1-" + rnd(HEX, 64)
    add("openrouter-key", f"OpenRouter {v} has $5 credit", v, keep=("has $5 credit",))
    v = "lsv2_pt_" + rnd(HEX, 32) + "_" + rnd(HEX, 10)
    add("langsmith-key", f"LangSmith tracing uses {v}", v)
    v = "pcsk_" + rnd(ALNUM, 6) + "_" + rnd(ALNUM, 63)
    add("pinecone-key", f"pinecone {v}", v)
    v = "tvly-" + rnd(ALNUM, 32)
    add("tavily-key", f"search via tavily {v}", v)

    # --- code hosting and package registries ----------------------------------------------------
    v = "ghp_" + rnd(ALNUM, 36)
    add("github-classic-pat", f"git clone https://github.com/acme/app with {v}", v)
    v = "gho_" + rnd(ALNUM, 36)
    add("github-oauth-token", f"oauth {v}", v)
    v = "ghs_" + rnd(ALNUM, 36)
    add("github-app-token", f"installation token {v} expires in 1h", v, keep=("expires in 1h",))
    v = "github_pat_" + rnd(ALNUM, 22) + "_" + rnd(ALNUM, 59)
    add("github-fine-grained-pat", f"fine-grained PAT: {v}", v)
    v = "glpat-" + rnd(B64URL, 20)
    add("gitlab-pat", f"GitLab token {v} for the runner", v, keep=("for the runner",))
    v = "npm_" + rnd(ALNUM, 36)
    add("npm-token", f"//registry.npmjs.org/:_authToken={v}", v, keep=("registry.npmjs.org",))
    v = "pypi-AgEIcHlwaS5vcmc" + rnd(B64URL, 70)
    add("pypi-token", f"twine upload -u __token__ -p {v} dist/*", v, keep=("twine upload",))

    # --- cloud ------------------------------------------------------------------------------
    v = "AKIA" + rnd(string.ascii_uppercase + "234567", 16)
    add("aws-access-key-id", f"aws_access_key_id = {v}", v)
    v = rnd(B64, 40)
    add(
        "aws-secret-key-in-prose",
        f"and the AWS secret access key is {v} — rotate it after the demo",
        v,
        keep=("rotate it after the demo",),
    )
    v = rnd(B64, 40)
    add("aws-secret-key-env", f"AWS_SECRET_ACCESS_KEY={v}", v, keep=("AWS_SECRET_ACCESS_KEY=",))
    v = "AIza" + rnd(B64URL, 35)
    add("google-api-key", f"Maps key {v}", v, keep=("Maps key",))
    v = rnd(HEX, 40)
    add(
        "gcp-private-key-id",
        f'{{"type": "service_account", "project_id": "demo-123", "private_key_id": "{v}"}}',
        v,
        keep=('"private_key_id": "', "service_account"),
    )
    block, body = _pem("PRIVATE KEY", escaped=True)
    add("gcp-service-account-private-key", f'"private_key": "{block}\\n",', body)
    v = "GOCSPX-" + rnd(B64URL, 28)
    add("google-oauth-client-secret", f"client secret {v}", v)
    v = rnd(B64, 86) + "=="
    add(
        "azure-storage-account-key",
        "DefaultEndpointsProtocol=https;AccountName=acmeprod;"
        f"AccountKey={v};EndpointSuffix=core.windows.net",
        v,
        keep=("AccountName=acmeprod", "AccountKey="),
    )
    v = rnd(ALNUM, 3) + "8Q~" + rnd(ALNUM + "_~.-", 31)
    add("azure-ad-client-secret", f"Entra app secret: {v}", v)
    v = "dop_v1_" + rnd(HEX, 64)
    add("digitalocean-pat", f"doctl auth init -t {v}", v, keep=("doctl auth init",))
    v = "hvs." + "CAESI" + rnd(B64URL, 90)
    add("vault-service-token", f"VAULT_TOKEN is {v}", v)
    v = "dapi" + rnd(HEX, 32)
    add("databricks-token", f"databricks token {v}", v)
    v = "sbp_" + rnd(HEX, 40)
    add("supabase-token", f"supabase login with {v}", v)

    # --- payments, messaging, SaaS -----------------------------------------------------------
    v = "sk_live_" + rnd(ALNUM, 24)
    add("stripe-secret-key", f"Stripe: {v}", v)
    v = "rk_live_" + rnd(ALNUM, 24)
    add("stripe-restricted-key", f"restricted {v}", v)
    v = "whsec_" + rnd(ALNUM, 32)
    add(
        "stripe-webhook-secret",
        f"the webhook signing secret {v} is in .env",
        v,
        keep=("is in .env",),
    )
    v = "shpat_" + rnd(HEX, 32)
    add("shopify-admin-token", f"Shopify admin API token {v}", v)
    v = "xoxb-" + rnd(string.digits, 12) + "-" + rnd(string.digits, 13) + "-" + rnd(ALNUM, 24)
    add("slack-bot-token", f"SLACK_BOT_TOKEN: {v}", v)
    v = "xapp-1-A" + rnd(string.ascii_uppercase + string.digits, 10) + "-" + rnd(string.digits, 13)
    v += "-" + rnd(HEX, 64)
    add("slack-app-token", f"socket mode token {v}", v)
    v = "T" + rnd("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", 8) + "/B" + rnd(ALNUM.upper(), 10)
    v += "/" + rnd(ALNUM, 24)
    add("slack-webhook", f"post to https://hooks.slack.com/services/{v}", v)
    v = "SG." + rnd(B64URL, 22) + "." + rnd(B64URL, 43)
    add("sendgrid-key", f"SendGrid {v}", v)
    v = "M" + rnd(B64URL, 25) + "." + rnd(B64URL, 6) + "." + rnd(B64URL, 38)
    add("discord-bot-token", f"the bot logs in with {v} on startup", v, keep=("on startup",))
    v = rnd(string.digits, 10) + ":AA" + rnd(B64URL, 33)
    add("telegram-bot-token", f"BotFather gave me {v}", v, keep=("BotFather gave me",))
    v = "SK" + rnd(HEX, 32)
    add("twilio-api-key", f"twilio key sid {v}", v)
    v = "key-" + rnd(HEX, 32)
    add("mailgun-key", f"MAILGUN_API_KEY={v}", v)
    v = "lin_api_" + rnd(ALNUM, 40)
    add("linear-key", f"Linear {v}", v)
    v = "ntn_" + rnd(string.digits, 11) + rnd(ALNUM, 35)
    add("notion-token-in-prose", f"my Notion token: {v}", v, keep=("my Notion token:",))
    v = "dp.st.prd." + rnd(ALNUM, 40)
    add("doppler-service-token", f"DOPPLER_TOKEN={v}", v)
    v = "ATATT3xFfGF0" + rnd(B64URL, 171) + "=" + rnd(HEX.upper(), 8)
    add("atlassian-api-token", f"Jira API token {v}", v)
    v = "PMAK-" + rnd(HEX, 24) + "-" + rnd(HEX, 34)
    add("postman-key", f"postman {v}", v)
    v = "sntryu_" + rnd(HEX, 64)
    add("sentry-user-token", f"sentry-cli with {v}", v)
    v = "glsa_" + rnd(ALNUM, 32) + "_" + rnd(HEX, 8)
    add("grafana-service-account-token", f"grafana {v}", v)
    v = "AGE-SECRET-KEY-1" + rnd(BECH32, 58)
    add("age-secret-key", f"# created: 2026-11-30\n{v}", v, keep=("# created: 2026-11-30",))

    # --- credentials in URLs, headers, prose -------------------------------------------------
    v = rnd(ALNUM, 5) + "@" + rnd(ALNUM, 6) + "@" + rnd(ALNUM, 4)
    add(
        "mongodb-url-password-with-at",
        f"mongodb+srv://appuser:{v}@cluster0.x1y2z.mongodb.net/prod?retryWrites=true",
        v,
        keep=("mongodb+srv://appuser:", "@cluster0.x1y2z.mongodb.net/prod"),
    )
    v = rnd(ALNUM, 14)
    add(
        "postgres-url-password",
        f"DATABASE_URL=postgresql://admin:{v}@db.internal:5432/app",
        v,
        keep=("postgresql://admin:", "@db.internal:5432/app"),
    )
    v = rnd(B64URL, 36)
    add(
        "bearer-header",
        f"curl -H 'Authorization: Bearer {v}' https://api.example.com",
        v,
        keep=("Authorization: Bearer", "https://api.example.com"),
    )
    v = rnd(B64, 28) + "=="
    add("basic-auth-header", f"Authorization: Basic {v}", v, keep=("Authorization: Basic",))
    v = rnd(ALNUM + "!#%&*", 12)
    add(
        "password-in-prose",
        f"the root password is {v} and sudo asks for it twice",
        v,
        keep=("the root password is", "and sudo asks for it twice"),
    )
    v = rnd(ALNUM, 16)
    add("password-in-yaml", f"db:\n  user: app\n  password: {v}\n", v, keep=("user: app",))
    v = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJ" + rnd(B64URL, 60) + "." + rnd(B64URL, 43)
    add("jwt", f"session cookie {v}", v, keep=("session cookie",))
    block, body = _pem("RSA PRIVATE KEY", lines=8)
    add("rsa-private-key-block", f"key.pem:\n{block}\nend of file", body, keep=("end of file",))
    block, body = _pem("OPENSSH PRIVATE KEY", lines=5)
    add("openssh-private-key-block", f"~/.ssh/id_ed25519 is\n{block}\n", body)
    return c


SECRET_CASES: tuple[SecretCase, ...] = tuple(_cases())

# The misses from the adversarial trial that motivated the ruleset; each must be in SECRET_CASES.
TRIAL_MISSES = (
    "stripe-webhook-secret",
    "gitlab-pat",
    "aws-secret-key-in-prose",
    "huggingface-token",
    "npm-token",
    "sendgrid-key",
    "discord-bot-token",
    "azure-storage-account-key",
    "password-in-prose",
    "mistral-key-in-prose",
    "groq-key",
    "vault-service-token",
    "digitalocean-pat",
    "shopify-admin-token",
    "gcp-private-key-id",
    "mongodb-url-password-with-at",
)


# --- what people type ------------------------------------------------------------------------
#
# Secrets as people write them to an agent, in running text: passwords in prose (six languages),
# URL passwords with an empty user, command lines, answers to a password question, card numbers,
# bare tokens without a keyword. The values come from generators that imitate how people pick
# them (a word, digits, a symbol; leetspeak; a passphrase; a password manager's output; a PIN),
# drawn from their own seeded generator; the sentences are written out, one per case.

_typed_rng = random.Random(20261207)

_WORDS = [
    "zebra",
    "dragon",
    "falcon",
    "winter",
    "summer",
    "monkey",
    "tiger",
    "sunshine",
    "harbor",
    "maple",
    "copper",
    "orbit",
    "velvet",
    "cactus",
    "pepper",
    "lantern",
    "meadow",
    "rocket",
    "silver",
    "puzzle",
    "kitten",
    "thunder",
    "garden",
    "violet",
    "marble",
    "comet",
    "willow",
    "canyon",
    "pirate",
    "nectar",
    "quartz",
    "raven",
    "saturn",
    "tundra",
    "walnut",
    "yellow",
]
_FOREIGN = [
    "geheim",
    "sommer",
    "sonne",
    "soleil",
    "fraise",
    "gato",
    "playa",
    "mariposa",
    "sakura",
    "tora",
    "hoshi",
]
_SYMBOLS = "!#$%&*?@+=-_"


def _cap(word: str) -> str:
    return word[0].upper() + word[1:]


def human_password() -> str:
    """A password of the kinds people choose and then paste into chats."""
    r = _typed_rng
    word = r.choice(_WORDS + _FOREIGN)
    kind = r.randrange(7)
    if kind == 0:  # Zebra#2291q
        return _cap(word) + r.choice(_SYMBOLS) + str(r.randrange(1000, 9999)) + r.choice("qxzk")
    if kind == 1:  # s3cr3t!Pass
        leet = word.translate(str.maketrans("aeios", "43105"))
        return leet + r.choice(_SYMBOLS) + _cap(r.choice(_WORDS))
    if kind == 2:  # Summer2024!
        return _cap(word) + str(r.randrange(1990, 2030)) + r.choice("!?#$")
    if kind == 3:  # bluefish77
        return word + r.choice(_WORDS) + str(r.randrange(10, 99))
    if kind == 4:  # a password manager's: xK9#mP2$vL8q
        pool = string.ascii_letters + string.digits + "#$%&*!@^"
        while True:
            out = "".join(r.choice(pool) for _ in range(r.randrange(12, 21)))
            if any(c.isdigit() for c in out) and any(c in "#$%&*!@^" for c in out):
                return out
    if kind == 5:  # Qwerty!7788
        return (
            r.choice(("Qwerty", "Asdf", "Passw0rd", "Welcome", "Letmein"))
            + r.choice("!@#")
            + str(r.randrange(100, 9999))
        )
    return _cap(word) + str(r.randrange(10, 999)) + r.choice(_SYMBOLS) + r.choice("xyzw")


def passphrase(sep: str = " ") -> str:
    """Four words, no digits: "purple monkey lantern orbit"."""
    return sep.join(_typed_rng.sample(_WORDS, 4))


def pin(n: int = 4) -> str:
    return "".join(_typed_rng.choice(string.digits) for _ in range(n))


def token(n: int = 32, alphabet: str = ALNUM) -> str:
    """A generated token: every kind of character its alphabet has (how API consoles print them)."""
    kinds = [k for k in (str.isdigit, str.islower, str.isupper) if any(k(c) for c in alphabet)]
    while True:
        out = "".join(_typed_rng.choice(alphabet) for _ in range(n))
        if all(any(k(c) for c in out) for k in kinds):
            return out


def luhn_card(prefix: str, length: int) -> str:
    """A card number of `length` digits starting with `prefix` whose Luhn check digit is right."""
    body = prefix + "".join(
        _typed_rng.choice(string.digits) for _ in range(length - len(prefix) - 1)
    )
    total = 0
    for i, ch in enumerate(reversed(body)):
        d = int(ch)
        if i % 2 == 0:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return body + str((10 - total % 10) % 10)


def _grouped(number: str, sep: str, sizes: tuple[int, ...]) -> str:
    out, at = [], 0
    for size in sizes:
        out.append(number[at : at + size])
        at += size
    return sep.join(out)


@dataclass(frozen=True)
class TypedCase:
    """One message with secrets in it; `previous` is the message before it (a question)."""

    name: str
    text: str
    secrets: tuple[str, ...]
    keep: tuple[str, ...] = ()
    previous: str | None = None


def _typed_cases() -> list[TypedCase]:
    c: list[TypedCase] = []

    def add(
        name: str, text: str, *secrets: str, keep: tuple[str, ...] = (), previous: str | None = None
    ) -> None:
        c.append(TypedCase(name, text, secrets, keep, previous))

    pw = human_password
    # --- prose passwords, English ------------------------------------------------------------
    v = pw()
    add(
        "en-password-for-db",
        f"the password for the staging db is {v}",
        v,
        keep=("the password for the staging db is",),
    )
    v = pw()
    add("en-the-pass-is", f"the pass is {v}", v, keep=("the pass is",))
    v = pw()
    add("en-use-as-password", f"use {v} as the admin password", v, keep=("as the admin password",))
    v = pw()
    add("en-pw-colon", f"pw: {v}", v)
    v = pw()
    add("en-pwd-is", f"pwd is {v} btw", v, keep=("btw",))
    v = pw()
    add("en-wifi", f"The wifi password is {v} if anyone asks.", v, keep=("if anyone asks.",))
    v = pw()
    add("en-bank", f"My bank password is {v}, don't tell anyone", v, keep=("don't tell anyone",))
    v = pw()
    add("en-user-pass-pair", f"user: admin pass: {v}", v, keep=("user: admin",))
    v = pw()
    add(
        "en-creds-colon",
        f"creds are admin:{v} for the grafana box",
        v,
        keep=("for the grafana box",),
    )
    v = pw()
    add(
        "en-reset-to",
        f"The router's admin password was reset to {v} this morning",
        v,
        keep=("this morning",),
    )
    v = pw()
    add("en-changed-to", f"I changed my password to {v} yesterday", v, keep=("yesterday",))
    v = pw()
    add(
        "en-set-root-to",
        f"set the root password to {v} on all three boxes",
        v,
        keep=("on all three boxes",),
    )
    v = pw()
    add("en-new-password", f"New password: {v}", v, keep=("New password:",))
    v = pw()
    add(
        "en-temporary",
        f"temporary password {v} (change it on first login)",
        v,
        keep=("change it on first login",),
    )
    v = pw()
    add("en-backticks", f"Password is `{v}`", v)
    v = pw()
    add(
        "en-icloud",
        f"her iCloud password is {v} — she asked me to keep it",
        v,
        keep=("she asked me to keep it",),
    )
    v = pw()
    add("en-vpn", f"the VPN password: {v}", v, keep=("the VPN password:",))
    v = pw()
    add("en-db-equals", f"DB password = {v}", v)
    v = pw()
    add("en-sudo", f"sudo password is {v} on the build box", v, keep=("on the build box",))
    v = pw()
    add("en-nas", f"the password to the NAS is {v}", v)
    v = pw()
    add(
        "en-reversed",
        f"{v} is the password for the guest network",
        v,
        keep=("is the password for the guest network",),
    )
    v = pw()
    add(
        "en-with-password",
        f"ssh in as deploy with password {v} and run the script",
        v,
        keep=("and run the script",),
    )
    v = pw()
    add("en-try-as", f"try {v} as the password, I think that's it", v, keep=("I think that's it",))
    v = pw()
    add("en-for-jenkins", f"Password for jenkins: {v}", v)
    v = pw()
    add("en-master", f"here's the master password: {v}", v)
    v = pw()
    add(
        "en-login-slash",
        f"Netflix login is family@example.com / {v}",
        v,
        keep=("family@example.com",),
    )
    v = pw()
    add("en-literally", f"my password is literally {v} lol", v, keep=("lol",))
    v = pw()
    add("en-arrow", f"admin password -> {v}", v)
    v = pw()
    add("en-if-you-need-it", f"The password, if you need it, is {v}.", v)
    v = pw()
    add("en-email-password", f"email: ops@acme.io password: {v}", v, keep=("email: ops@acme.io",))
    v = pw()
    add("en-keystore", f"the keystore password is {v}, alias upload", v, keep=("alias upload",))
    v = pw()
    add("en-quoted", f'password is "{v}" (with the quotes stripped)', v)
    v = pw()
    add("en-wpa", f"WPA2 key: {v}", v)
    v = pw()
    add("en-its-pw", f"it's {v} for the admin panel password", v)
    v = pw()
    add("en-pass-equals", f"pass={v}", v)
    v = pw()
    add(
        "en-password-was",
        f"the old password was {v} before the rotation",
        v,
        keep=("before the rotation",),
    )
    v = pw()
    add(
        "en-password-multiline",
        f"Login details\nusername: jdoe\npassword: {v}\n",
        v,
        keep=("username: jdoe",),
    )
    v = pw()
    add("en-default-password", f"default password on these cameras is {v}", v)
    v = passphrase()
    add("en-passphrase-words", f"the passphrase is {v}", v, keep=("the passphrase is",))
    v = passphrase("-")
    add("en-passphrase-dashes", f"GPG passphrase: {v}", v, keep=("GPG passphrase:",))
    v = passphrase()
    add(
        "en-passphrase-backup",
        f"the backup passphrase is {v}. write it down somewhere safe",
        v,
        keep=("write it down somewhere safe",),
    )
    v = pin()
    add("en-pin-is", f"my PIN is {v}", v, keep=("my PIN is",))
    v = pin(6)
    add("en-pin-colon", f"SIM PIN: {v}", v)
    v = pin()
    add(
        "en-door-code",
        f"the door code is {v}, the gate opens by itself",
        v,
        keep=("the gate opens by itself",),
    )
    v = pin()
    add("en-alarm-code", f"alarm code {v}", v)
    v = pin(6)
    add("en-pin-number", f"the PIN number for the card is {v}", v)

    # --- prose passwords, German, French, Spanish, Chinese, Japanese ------------------------
    v = pw()
    add("de-mein-passwort", f"mein Passwort ist {v}", v, keep=("mein Passwort ist",))
    v = pw()
    add("de-lautet", f"das Passwort lautet {v}", v, keep=("das Passwort lautet",))
    v = pw()
    add("de-colon", f"Passwort: {v}", v)
    v = pw()
    add("de-kennwort", f"Kennwort für den Router: {v}", v, keep=("Kennwort für den Router:",))
    v = pw()
    add(
        "de-wlan",
        f"Das WLAN-Passwort ist {v}, steht auch auf dem Zettel",
        v,
        keep=("steht auch auf dem Zettel",),
    )
    v = pin()
    add("de-pin", f"die PIN ist {v}", v)
    v = pw()
    add("de-benutzer", f"Benutzer: admin, Passwort {v}", v, keep=("Benutzer: admin",))
    v = pw()
    add("fr-est", f"le mot de passe est {v}", v, keep=("le mot de passe est",))
    v = pw()
    add("fr-colon", f"mot de passe : {v}", v)
    v = pw()
    add("fr-mdp", f"mon mdp c'est {v}", v)
    v = pw()
    add("fr-wifi", f"Le mot de passe du wifi est {v} !", v, keep=("Le mot de passe du wifi est",))
    v = pin()
    add("fr-pin", f"le code PIN est {v}", v)
    v = pw()
    add(
        "fr-identifiants",
        f"identifiant : admin / mot de passe : {v}",
        v,
        keep=("identifiant : admin",),
    )
    v = pw()
    add("es-es", f"la contraseña es {v}", v, keep=("la contraseña es",))
    v = pw()
    add("es-colon", f"contraseña: {v}", v)
    v = pw()
    add("es-clave", f"mi clave es {v}", v)
    v = pw()
    add(
        "es-wifi",
        f"La contraseña del wifi es {v}, está en la nevera",
        v,
        keep=("está en la nevera",),
    )
    v = pin()
    add("es-pin", f"el PIN es {v}", v)
    v = pw()
    add("es-usuario", f"usuario: admin contraseña: {v}", v, keep=("usuario: admin",))
    v = pw()
    add("zh-shi", f"密码是{v}", v, keep=("密码是",))
    v = pw()
    add("zh-wode", f"我的密码是 {v}，别告诉别人", v, keep=("别告诉别人",))
    v = pw()
    add("zh-colon", f"密码：{v}", v)
    v = pw()
    add("zh-wifi", f"WiFi密码是{v}", v)
    v = pin(6)
    add("zh-pin", f"PIN码是{v}", v)
    v = pw()
    add("zh-koling", f"服务器的登录口令为 {v}", v)
    v = pw()
    add("ja-desu", f"パスワードは{v}です", v, keep=("パスワードは", "です"))
    v = pw()
    add("ja-colon", f"パスワード：{v}", v)
    v = pw()
    add("ja-wifi", f"Wi-Fiのパスワードは {v} です", v)
    v = pin()
    add("ja-anshou", f"暗証番号は{v}です", v)
    v = pw()
    add("ja-login", f"ログインパスワード: {v}", v)

    # --- URL passwords with an empty user ------------------------------------------------------
    v = pw()
    add(
        "url-redis-empty-user",
        f"REDIS_URL=redis://:{v}@cache:6379/0",
        v,
        keep=("redis://:", "@cache:6379/0"),
    )
    v = token(24)
    add("url-rediss", f"connect to rediss://:{v}@redis.internal:6380", v)
    v = pw()
    add("url-amqp-empty-user", f"amqp://:{v}@rabbit.local:5672/", v, keep=("@rabbit.local:5672/",))
    v = "ghp_" + token(36)
    add(
        "url-https-token-as-password",
        f"git remote set-url origin https://:{v}@github.com/acme/app.git",
        v,
        keep=("@github.com/acme/app.git",),
    )
    v = pw()
    add("url-postgres-empty-user", f"psql postgres://:{v}@db/app", v)
    v = pw()
    add("url-mongodb-empty-user", f"the connection string is mongodb://:{v}@mongo-0:27017", v)

    # --- command lines ---------------------------------------------------------------------------
    v = token(9)
    add("cli-sshpass-quoted", f"sshpass -p '{v}' ssh root@10.0.0.5", v, keep=("ssh root@10.0.0.5",))
    v = pw()
    add(
        "cli-sshpass-double",
        f'sshpass -p "{v}" scp backup.tar deploy@nas:',
        v,
        keep=("scp backup.tar",),
    )
    v = token(12)
    add("cli-sshpass-attached", f"sshpass -p{v} rsync -a ./ host:/srv", v)
    v = pw()
    add("cli-mysql-attached", f"mysql -uroot -p{v} shop", v, keep=("mysql -uroot -p", " shop"))
    v = pw()
    add("cli-mysql-quoted", f"mysql -u admin -p'{v}' -h db.internal", v, keep=("-h db.internal",))
    v = pw()
    add(
        "cli-mysql-long",
        f"mysqldump --user=app --password={v} app > dump.sql",
        v,
        keep=("> dump.sql",),
    )
    v = pw()
    add(
        "cli-curl-u",
        f"curl -u alice:{v} https://api.example.com/v1/me",
        v,
        keep=("curl -u alice:", "https://api.example.com/v1/me"),
    )
    v = pw()
    add("cli-curl-user", f"curl --user admin:{v} -X POST http://localhost:8080/reload", v)
    v = token(40)
    add("cli-curl-empty-user", f'curl -u ":{v}" https://registry.example.com/v2/', v)
    v = pw()
    add("cli-pgpassword", f"PGPASSWORD={v} psql -h db -U app", v, keep=("psql -h db -U app",))
    v = pw()
    add(
        "cli-docker-login",
        f"docker login -u bob -p {v} registry.acme.io",
        v,
        keep=("registry.acme.io",),
    )
    v = pw()
    add("cli-redis-cli", f"redis-cli -h cache -a {v} ping", v, keep=("ping",))
    v = pw()
    add("cli-openssl-pass", f"openssl pkcs12 -export -out cert.p12 -passout pass:{v}", v)
    v = pw()
    add("cli-keytool", f"keytool -list -keystore app.jks -storepass {v}", v)
    v = pw()
    add("cli-smbclient", f"smbclient //fs/share -U bob%{v}", v)
    v = pw()
    add("cli-net-use", f"net use Z: \\\\fileserver\\team /user:ACME\\bob {v}", v)
    v = pw()
    add("cli-htpasswd", f"htpasswd -b /etc/nginx/.htpasswd admin {v}", v)
    v = pw()
    add("cli-sqlcmd", f'sqlcmd -S db01 -U sa -P {v} -Q "select 1"', v)
    v = pw()
    add("cli-ldapsearch", f"ldapsearch -x -D cn=admin,dc=acme -w {v} -b dc=acme", v)
    v = pw()
    add("cli-zip", f"zip -P {v} -r secrets.zip keys/", v)
    v = pw()
    add("cli-wget", f"wget --user=ftp --password={v} ftp://files.acme.io/dump.gz", v)
    v = pw()
    add("cli-password-flag", f"./install.sh --admin-user root --password {v}", v)

    # --- answers to a password question ------------------------------------------------------------
    v = pw()
    add("qa-root", v, v, previous="what's the root password?")
    v = pw()
    add("qa-its", f"it's {v}", v, previous="What's the wifi password?")
    v = pw()
    add("qa-bare-question", f"{v}", v, previous="password?")
    v = pw()
    add("qa-sure", f"sure: {v}", v, keep=("sure:",), previous="can you send me the db password")
    v = pin()
    add("qa-pin", v, v, previous="what's the PIN for the garage?")
    v = pw()
    add("qa-de", v, v, previous="Wie lautet das Passwort?")
    v = pw()
    add("qa-fr", f"c'est {v}", v, previous="c'est quoi le mot de passe ?")
    v = pw()
    add("qa-es", f"es {v}", v, previous="¿cuál es la contraseña?")
    v = pw()
    add("qa-zh", v, v, previous="密码是多少？")
    v = pw()
    add("qa-ja", v, v, previous="パスワードは何ですか？")
    v = passphrase()
    add("qa-passphrase", v, v, previous="and the passphrase?")
    v = pw()
    add("qa-backticks", f"`{v}`", v, previous="remind me of the VPN password")
    v = pw()
    add("qa-try", f"try {v}", v, previous="what was the password for the old router again?")
    v = pw()
    add(
        "qa-the-password-is-quoted",
        f"I think it is {v}",
        v,
        previous="do you remember the NAS password?",
    )

    # --- card numbers -----------------------------------------------------------------------------
    v = luhn_card("4", 16)
    add(
        "card-visa-spaced",
        f"card: {_grouped(v, ' ', (4, 4, 4, 4))} exp 09/27",
        _grouped(v, " ", (4, 4, 4, 4)),
        keep=("exp 09/27",),
    )
    v = luhn_card("51", 16)
    add(
        "card-mastercard-dashed",
        f"my Mastercard is {_grouped(v, '-', (4, 4, 4, 4))}",
        _grouped(v, "-", (4, 4, 4, 4)),
    )
    v = luhn_card("37", 15)
    add("card-amex", f"Amex {_grouped(v, ' ', (4, 6, 5))}, CID 1234", _grouped(v, " ", (4, 6, 5)))
    v = luhn_card("4", 16)
    add("card-plain-digits", f"pay with {v} please", v, keep=("please",))
    v = luhn_card("6011", 16)
    add("card-discover", f"Discover card {v}", v)
    v = luhn_card("22", 16)
    add(
        "card-mastercard-2series",
        f"new card number {_grouped(v, ' ', (4, 4, 4, 4))}",
        _grouped(v, " ", (4, 4, 4, 4)),
    )
    v = luhn_card("4", 16)
    add(
        "card-de",
        f"Kartennummer {_grouped(v, ' ', (4, 4, 4, 4))}, gültig bis 03/28",
        _grouped(v, " ", (4, 4, 4, 4)),
    )
    v = luhn_card("35", 16)
    add("card-jcb", f"JCBカード {v}", v)
    v = luhn_card("4", 16)
    add("card-in-json", f'{{"card": "{v}", "exp": "11/26"}}', v)
    v = luhn_card("5", 16)
    add(
        "card-with-cvv", f"{_grouped(v, ' ', (4, 4, 4, 4))} cvv 417", _grouped(v, " ", (4, 4, 4, 4))
    )

    # --- tokens in prose, no keyword ------------------------------------------------------------------
    v = token(32)
    add("prose-token-here-you-go", f"here you go: {v}", v, keep=("here you go:",))
    v = token(40)
    add(
        "prose-token-paste",
        f"paste {v} into the settings page and save",
        v,
        keep=("into the settings page and save",),
    )
    v = token(24, ALNUM + "-_")
    add("prose-token-dont-share", f"it's {v} — don't share it", v)
    v = token(48)
    add("prose-token-webhook", f"the webhook signs with {v}", v)
    v = token(36, ALNUM + "-_")
    add("prose-token-newline", f"Got it from the console:\n{v}\nworks now", v, keep=("works now",))
    v = token(28)
    add("prose-token-parens", f"(the one ending in …) {v}", v)
    v = token(64, B64URL)
    add("prose-token-long", f"long one: {v}", v)
    v = token(20)
    add("prose-token-short", f"use {v} for staging", v, keep=("for staging",))
    v = token(44, B64) + "="
    add("prose-token-base64", f"the shared secret is now {v}", v)
    v = token(32)
    add("prose-token-quote", f'he sent "{v}" on Slack', v, keep=("on Slack",))

    # --- Vault and AWS ------------------------------------------------------------------------------------
    v = "hvs." + token(24)
    add(
        "vault-hvs-short",
        f"VAULT_TOKEN={v} vault kv get secret/app",
        v,
        keep=("vault kv get secret/app",),
    )
    v = "hvs." + token(24)
    add("vault-hvs-prose", f"the root token is {v}", v)
    v = "hvs.CAESI" + token(86, B64URL)
    add("vault-hvs-namespaced", f"login with {v}", v)
    v = "hvb.AAAAAQ" + token(130, B64URL)
    add("vault-hvb-batch", f"batch token {v}", v)
    v = "hvr." + token(24)
    add("vault-hvr-recovery", f"recovery token: {v}", v)
    v = "hvs." + token(24)
    add("vault-header", f"X-Vault-Token: {v}", v)
    v = token(40, B64)
    add("aws-secret-bare-prose", f"aws creds for the sandbox: {v}", v)
    a, v = "AKIA" + rnd(string.ascii_uppercase + "234567", 16), token(40, B64)
    add("aws-pair-slash", f"{a} / {v}", a, v)
    v = token(40, B64)
    add("aws-secret-its", f"it's {v}, the secret half", v, keep=("the secret half",))
    v = token(40, B64)
    add("aws-secret-list", f"- id AKIA… (see vault)\n- secret {v}", v)
    v = token(40, B64)
    add("aws-secret-credentials-file", f"[default]\naws_secret_access_key={v}", v)

    # --- keys and tokens with a keyword, as typed -------------------------------------------------------
    v = token(32)
    add("kv-api-key-colon", f"API key: {v}", v)
    v = token(40)
    add("kv-token-space", f"token {v}", v)
    v = token(32, ALNUM + "-_")
    add("kv-client-secret-arrow", f"client secret -> {v}", v)
    v = token(40, HEX)
    add("kv-authorization-token", f"Authorization: Token {v}", v)
    v = "sk_live_" + token(24)
    add("kv-env-stripe", f"STRIPE_SECRET={v}", v)
    v = "ghp_" + token(36)
    add("kv-export-github", f"export GITHUB_TOKEN={v}", v)
    v = "sk-proj-" + token(48, B64URL)
    add("kv-openai-prose", f"OPENAI_API_KEY is {v}", v)
    v = token(32)
    add("kv-secret-word", f"the secret is {v}", v)
    v = token(26)
    add("kv-api-key-for", f"my API key for the weather service is {v}", v)
    v = token(48, B64URL)
    add("kv-bot-token", f"bot token = {v}", v)
    return c


TYPED_CASES: tuple[TypedCase, ...] = tuple(_typed_cases())


def _later_cases() -> list[TypedCase]:
    """Phrasings written after the rules were, to see how they do on text they were not made
    for (docs/redaction.md gives the first-contact figure). Kept apart so that stays visible."""
    _typed_rng.seed(99)
    c: list[TypedCase] = []

    def add(text: str, *secrets: str, previous: str | None = None) -> None:
        c.append(TypedCase(f"later-{len(c) + 1:02d}", text, secrets, (), previous))

    pw, tok = human_password, token
    v = pw()
    add(f"btw the staging password got rotated, new one: {v}", v)
    v = pw()
    add(f"the code for the wifi is {v}", v)
    v = pw()
    add(f"login for the CMS → admin / {v}", v)
    v = pw()
    add(f"here are the creds: deploy / {v}", v)
    v = pw()
    add(f"Her password? {v}", v)
    v = pw()
    add(f"password hint: it's {v}", v)
    v = pw()
    add(f"Kennwort lautet: {v}", v)
    v = pw()
    add(f"le mot de passe, c'est {v}", v)
    v = pw()
    add(f"la contraseña nueva es {v}", v)
    v = pw()
    add(f"Das neue Passwort: {v}", v)
    v = pw()
    add(f"新密码：{v}", v)
    v = pw()
    add(f"初期パスワードは {v} です", v)
    v = pw()
    add(f"pw for grafana = {v}", v)
    v = pw()
    add(f"PASSWORD={v}", v)
    v = pw()
    add(f"DB_PASS={v}", v)
    v = pw()
    add(f"export MYSQL_ROOT_PASSWORD='{v}'", v)
    v = pw()
    add(f"ftp://upload:{v}@files.acme.io/in", v)
    v = pw()
    add(f"smtp password {v}", v)
    v = pw()
    add(f"echo '{v}' | sudo -S apt update", v)
    v = pin()
    add(f"The PIN to unlock the phone is {v}", v)
    v = _grouped(luhn_card("4", 16), " ", (4, 4, 4, 4))
    add(f"charge {v} for the hotel", v)
    v = tok(32)
    add(f"token: {v}", v)
    v = tok(40)
    add(f'API_TOKEN = "{v}"', v)
    v = tok(32)
    add(v, v)
    v = tok(40)
    add(f"here's the deploy key {v}", v)
    v = "hvs." + tok(24)
    add(f'{{"token":"{v}"}}', v)
    v = tok(40, B64)
    add(f"aws_secret_access_key: {v}", v)
    v = pw()
    add(f"I use {v} everywhere, yes I know", v)
    v = pin()
    add(f"yes, {v}", v, previous="Do you have the alarm code?")
    v = pw()
    add(v, v, previous="what's the password to the shared drive")
    v = pw()
    add(f"pass: {v}", v)
    v = pw()
    add(f"Passwort für das WLAN lautet {v}", v)
    v = pw()
    add(f"wifi: MyNetwork / {v}", v)
    v = pw()
    add(f"mysql -u root --password='{v}'", v)
    v = pw()
    add(f"docker run -e POSTGRES_PASSWORD={v} postgres", v)
    v = tok(20)
    add(f"git clone https://oauth2:{v}@gitlab.com/acme/app.git", v)
    v = tok(32)
    add(f"the secret key is {v}", v)
    v = pw()
    add(f"Contraseña del router: {v}", v)
    v = pw()
    add(f"root / {v} on the new VPS", v)
    v = pw()
    add(f"she typed {v} into the login box", v)
    return c


LATER_CASES: tuple[TypedCase, ...] = tuple(_later_cases())


def leaked_fragments(output: str, secret: str, width: int = 6) -> list[str]:
    """Every `width`-character window of `secret` still present in `output` (empty: fully redacted)."""
    width = min(width, len(secret))
    found = {secret[i : i + width] for i in range(len(secret) - width + 1)}
    return sorted(f for f in found if f in output)


# Look-alikes that are not secrets. Redacting any of them would hide real memory.
DEVELOPER_NOTES: tuple[str, ...] = (
    "commit 3f9a1c2e4b5d6f708192a3b4c5d6e7f8091a2b3c fixed the flaky test",
    "reverted 9fceb02 and cherry-picked a1b2c3d onto release/2.4",
    "uuid 123e4567-e89b-12d3-a456-426614174000 is the tenant id",
    "request-id: 7c9e6679-7425-40de-944b-e07fc1f90ae7 (look it up in the logs)",
    "bumped sqlite-vec to 0.1.6 and pydantic to 2.7.4; python 3.11.7 on the CI image",
    "released v2.3.0-rc.1+build.5 on 2026-11-28",
    "max_tokens=4000 and token_count: 12",
    "tokens: 4000",
    "llm --max-tokens 512 --temperature 0.2",
    "TOKEN_LIMIT=8192 and token_budget = 12000",
    "The bearer of bad news arrived at noon.",
    "Use a Bearer token in the Authorization header.",
    "Authorization: Bearer <token>",
    "Authorization: Bearer $GITHUB_TOKEN",
    "Basic authentication is disabled by default.",
    "Token authentication works too.",
    "echo 'aGVsbG8gd29ybGQ=' | base64 -d prints hello world",
    "a 1x1 PNG is iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "see https://github.com/openai/openai-python/blob/main/README.md#L10",
    "clone ssh://git@github.com:22/acme/app.git or git@github.com:acme/app.git",
    "postgres://localhost:5432/app and redis://redis:6379/0 in docker compose",
    "https://alice@example.com/calendar has no password in it",
    "http://[::1]:8080/health returned 200",
    "https://example.com/search?q=api_key+rotation&page=2",
    "mailto:alice@example.com",
    "api_key=os.environ['OPENAI_API_KEY']",
    'token = os.getenv("GITHUB_TOKEN")',
    "password: ${DB_PASSWORD}",
    "api_key: <your-api-key>",
    "OPENAI_API_KEY=sk-...",
    "secret: Optional[str] = None",
    "I reset my password yesterday; the password reset email came.",
    "password: short",
    "the password is on the fridge",
    "the password is stored in 1Password",
    "the key is to keep it simple",
    "the key is 42",
    "the API key is in the vault now",
    "my OpenAI key is in the team vault",
    "my GitHub token expired last week",
    "The secret to good bread is time.",
    "The key takeaway: ship small changes.",
    "Set apiKey in the config file.",
    "AKIA is a prefix, AKIA123 is too short",
    "ask-ant-eater and task-proj-manager are words; sk-short is not a key",
    "risk_live_updates and desk_test_plan are function names",
    "eyJ alone is not a JWT",
    "xoxb is a Slack prefix, hf_ is Hugging Face's",
    "Meeting at 10:30, room 123456789:AB",
    "the MD5 of an empty file is d41d8cd98f00b204e9800998ecf8427e",
    "SHA-256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "docker pull ghcr.io/acme/app@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop",
    "-----BEGIN PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----",
    "client_id: 1234567890-abc123def456.apps.googleusercontent.com",
    "private_key_path = ~/.ssh/id_ed25519",
    "auth_token_ttl=3600 and access_token_expires_in: 3600",
    "ISBN 978-3-16-148410-0, phone +1 415 555 0132",
    "AdGuard on 192.168.10.2, MAC 00:1B:44:11:3A:B7, v6 2001:db8::1",
    "Tokyo is at 35.6762,139.6503",
    "run pytest -k test_token_refresh -x",
    "get_api_key(config) reads config.api_key",
    "C'est déjà l'été — 東京で会いましょう",
    "| key | value |\n|---|---|\n| region | eu-west-1 |",
    "Kubernetes secret names: db-credentials, api-keys",
    "the monkey, the turkey and the keyboard",
)


# Ordinary sentences near the rules for what people type: password talk without a password,
# PIN diagrams, card-like and ID-like numbers, identifiers, digests, URLs with IDs in them.
EVERYDAY_LOOKALIKES: tuple[str, ...] = (
    "Password must be at least 12 characters and include a symbol.",
    "Your password expires in 14 days.",
    "The PIN diagram shows pin 13 as ground.",
    "GPIO pin 18 drives the LED",
    "Order number 4000 1234 5678 9010 shipped",
    "Call me at 0176 1234 5678",
    "ISBN 978-0-306-40615-7",
    "Tracking: 1Z999AA10123456784",
    "commit a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0",
    "YouTube link https://youtu.be/dQw4w9WgXcQ",
    "Google doc https://docs.google.com/document/d/1BxiMVs0XRA5nFMdKvBdBZjgmUUqptlbs74OgvE2upms/edit",
    "npm integrity sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+LFTGHVxVjcXPs4Hxx==",
    "The passphrase should be four random words.",
    "I forgot my password again lol",
    "use a password manager like Bitwarden",
    "The password field is case-sensitive",
    "Mein Passwort ist zu kurz.",
    "Le mot de passe est incorrect.",
    "La contraseña es demasiado corta.",
    "密码错误，请重试",
    "パスワードを忘れました",
    "set the password to something memorable",
    "change your password to a passphrase",
    "pass the salt please",
    "the mountain pass is 2,000m high",
    "The pass is closed in winter",
    "my boarding pass is on my phone",
    "my PIN is the same as my birthday",
    "Key: value pairs go in the YAML",
    "kubectl get secret db-credentials -o yaml",
    "session id 7f3a9c2e-41b8-4d0e-9a6f-2b5c8d1e0f34",
    "ULID 01ARZ3NDEKTSV4RRFFQ69G5FAV",
    "Version 2.14.0-rc.1+build.20261204",
    "./gradlew assembleRelease -Pandroid.injected.signing.store.password=$KS_PASS",
    "password: ********",
    "pw: (see 1Password)",
    "the code is in src/auth/password.py",
    "Pass: 17 / Fail: 2",
    "PIN: see the envelope",
    "Meeting ID 845 1234 5678, passcode: see invite",
    "The WiFi network key is printed on the router",
    "Her login is alice@example.com",
    "user: admin / role: owner",
    "curl -u $USER:$TOKEN https://api.example.com",
    "mysql -u root -p mydb  # it asks for the password",
    "sshpass -f ~/.ssh/pass ssh host",
    "docker login -u bob --password-stdin < token.txt",
    "Weekly sync notes: we moved the release to Thursday because QA needs two more days.",
    "Bought 3 tickets for 45.50 EUR each, total 136.50",
    "The build took 1234567 ms on runner ubuntu-22.04-x64-4core",
    "Looking at CVE-2024-3094 in xz-utils 5.6.0",
    "React component <UserProfileSettingsPanel2 /> renders twice",
    "Flight LH2024 departs 07:45 from gate B12",
    "My favourite passages are in chapter 3",
    "The passport expires in 2031",
    "compass heading 270, wind 15 knots",
    "the spinning class pin 4 on the bike",
    "WPA2 is the security standard on the guest network",
    "our Wi-Fi is the password-protected one upstairs",
    "Kubernetes secret is mounted at /var/run/secrets/token",
)


def _lines(text: str) -> Iterator[str]:
    yield from (ln for ln in text.splitlines() if ln.strip())


def locomo_turns() -> list[str]:
    """Every LoCoMo dialogue turn in the dev split (`Speaker: text`), or [] when it is not here."""
    path = SHARED / "eval" / "locomo-dev" / "locomo-dev.json"
    if not path.is_file():
        return []
    out = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        for key, session in sample["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                for turn in session:
                    line = f"{turn['speaker']}: {turn['text']}"
                    if turn.get("blip_caption"):
                        line += f" [shares a photo: {turn['blip_caption']}]"
                    out.append(line)
    return out


def cranfield_abstracts() -> list[str]:
    """The 1,400 Cranfield abstracts (title, authors, text), or [] when they are not here."""
    path = SHARED / "eval" / "cranfield" / "cran.all.1400"
    if not path.is_file():
        return []
    docs = re.split(r"^\.I \d+\s*$", path.read_text(encoding="utf-8", errors="replace"), flags=re.M)
    return [d.strip() for d in docs if d.strip()]


def cisi_abstracts() -> list[str]:
    """The 1,460 CISI abstracts, or [] when they are not here."""
    path = SHARED / "eval" / "cisi" / "CISI.ALL"
    if not path.is_file():
        return []
    docs = re.split(r"^\.I \d+\s*$", path.read_text(encoding="utf-8", errors="replace"), flags=re.M)
    return [d.strip() for d in docs if d.strip()]


def demo_notes() -> list[str]:
    """The demo workspace's Markdown files, whole."""
    root = REPO / "demo" / "workspace"
    return [p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.md"))]


def innocent_corpus() -> dict[str, list[str]]:
    """Named sets of ordinary text; a set whose data is not on this machine is empty."""
    return {
        "locomo-turns": locomo_turns(),
        "cranfield-abstracts": cranfield_abstracts(),
        "cisi-abstracts": cisi_abstracts(),
        "demo-workspace": demo_notes(),
        "developer-notes": list(DEVELOPER_NOTES),
        "everyday-lookalikes": list(EVERYDAY_LOOKALIKES),
    }
