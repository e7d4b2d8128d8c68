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


def demo_notes() -> list[str]:
    """The demo workspace's Markdown files, whole."""
    root = REPO / "demo" / "workspace"
    return [p.read_text(encoding="utf-8") for p in sorted(root.rglob("*.md"))]


def innocent_corpus() -> dict[str, list[str]]:
    """Named sets of ordinary text; a set whose data is not on this machine is empty."""
    return {
        "locomo-turns": locomo_turns(),
        "cranfield-abstracts": cranfield_abstracts(),
        "demo-workspace": demo_notes(),
        "developer-notes": list(DEVELOPER_NOTES),
    }
