"""Secret redaction: a table of secret shapes that must go, and ordinary text that must stay.

Fake secrets are assembled at run time so no secret-shaped literal sits in the repository.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.redact import REDACTED
from memoryd.lifecycle import redact_secrets

B62 = "aB3dE5fG7hJ9kL1mN2pQ4rS6tU8vW0xY"  # 32 mixed letters and digits
UPPER = "ABCDEFGHIJKLMNOP2345"


def j(*parts: str) -> str:
    return "".join(parts)


# (case id, secret inside a sentence, text that must remain around it)
SECRETS = [
    ("openai", j("sk-", B62, "zz")),
    ("openai-proj", j("sk-", "proj-", B62, "_", B62)),
    ("openai-svcacct", j("sk-", "svcacct-", B62)),
    ("anthropic", j("sk-", "ant-", "api03-", B62, "-", B62)),
    ("github-classic", j("ghp", "_", B62, "abcd")),
    ("github-oauth", j("gho", "_", B62, "abcd")),
    ("github-fine-grained", j("github", "_pat_", "11ABCDEFG0", "_", B62, B62)),
    ("aws-access-key-id", j("AKIA", UPPER[:16])),
    ("aws-temp-key-id", j("ASIA", UPPER[:16])),
    ("slack-bot", j("xox", "b-", "1234567890", "-", "0987654321", "-", B62[:24])),
    ("slack-user", j("xox", "p-", "1234567890", "-", B62[:20])),
    ("slack-app", j("xox", "a-", "2-", B62[:20])),
    ("google", j("AIza", "Sy", B62[:30], "-_x")),
    ("stripe", j("sk", "_live_", B62)),
    ("telegram-bot", j("123456789", ":AA", B62, "x")),
    (
        "jwt",
        j(
            "eyJ",
            "hbGciOiJIUzI1NiJ9",
            ".",
            "eyJ",
            "zdWIiOiIxMjM0NTY3ODkwIn0",
            ".",
            "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        ),
    ),
]


@pytest.mark.parametrize(("name", "secret"), SECRETS, ids=[c[0] for c in SECRETS])
def test_token_shaped_secrets_are_redacted_in_running_text(name: str, secret: str) -> None:
    text = f"Here is my key {secret} please keep it safe."
    out = redact_secrets(text)
    assert secret not in out
    assert out == f"Here is my key {REDACTED} please keep it safe."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            j("Authorization: Bearer ", "abc123DEF456ghi789JKL0"),
            f"Authorization: Bearer {REDACTED}",
        ),
        (
            j("curl -H 'authorization: bearer ", B62, "'"),
            f"curl -H 'authorization: bearer {REDACTED}'",
        ),
        (
            j("Authorization: Basic ", "dXNlcjpwYXNzd29yZDEyMw=="),
            f"Authorization: Basic {REDACTED}",
        ),
        ("api_key=abcdef123456", f"api_key={REDACTED}"),
        ("OPENAI_API_KEY=abcdef123456", f"OPENAI_API_KEY={REDACTED}"),
        ('{"apiKey": "abcd-efgh-1234"}', f'{{"apiKey": "{REDACTED}"}}'),
        ("{'client_secret': 'hunter22'}", f"{{'client_secret': '{REDACTED}'}}"),
        ("password: correct-horse-battery", f"password: {REDACTED}"),
        (
            "AWS_SECRET_ACCESS_KEY = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            f"AWS_SECRET_ACCESS_KEY = {REDACTED}",
        ),
        ("auth_token=Zm9vYmFyYmF6", f"auth_token={REDACTED}"),
        (
            "postgres://admin:s3cr3tpass@db.internal:5432/app",
            f"postgres://admin:{REDACTED}@db.internal:5432/app",
        ),
        # the token-shape pass runs first; the key stays readable
        (j("api_key=sk-", B62), f"api_key={REDACTED}"),
        (j('"apiKey": "sk-', B62, '"'), f'"apiKey": "{REDACTED}"'),
    ],
)
def test_headers_assignments_and_urls_keep_the_name_and_drop_the_value(
    text: str, expected: str
) -> None:
    assert redact_secrets(text) == expected


def test_private_key_blocks_are_removed_whole() -> None:
    block = j(
        "-----BEGIN ",
        "RSA PRIVATE KEY-----\n",
        "MIIEowIBAAKCAQEA",
        B62,
        "\n",
        B62,
        "\n",
        "-----END ",
        "RSA PRIVATE KEY-----",
    )
    out = redact_secrets(f"my key:\n{block}\nthanks")
    assert out == f"my key:\n{REDACTED}\nthanks"


def test_an_unterminated_private_key_block_is_removed_to_the_end() -> None:
    text = j("paste: -----BEGIN ", "OPENSSH PRIVATE KEY-----\n", B62, "\n", B62)
    assert redact_secrets(text) == f"paste: {REDACTED}"


def test_several_secrets_in_one_text_all_go() -> None:
    a, b = j("ghp", "_", B62, "abcd"), j("AKIA", UPPER[:16])
    out = redact_secrets(f"{a} and {b} and {a}")
    assert out == f"{REDACTED} and {REDACTED} and {REDACTED}"


ORDINARY = [
    "The bearer of bad news arrived at noon.",
    "Use a Bearer token in the Authorization header.",
    "Basic authentication is disabled by default.",
    "Token authentication works too.",
    "ask-ant-eater and task-proj-manager are words",
    "sk-short is not a key",
    "max_tokens=4000 and token_count: 12",
    "tokens: 4000",
    "I reset my password yesterday; the password reset email came.",
    "password: short",
    "Set apiKey in the config file.",
    "commit 3f9a1c2e4b5d6f708192a3b4c5d6e7f8091a2b3c",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "AKIA is a prefix, AKIA123 is too short",
    "https://example.com/path?q=1 and mailto:alice@example.com",
    "eyJ alone is not a JWT",
    "xoxb is a Slack prefix",
    "Meeting at 10:30, room 123456789:AB",
    "C'est déjà l'été — 東京で会いましょう",
    "",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_secrets(text) == text


@given(st.text(alphabet=st.characters(whitelist_categories=("L", "Zs")), max_size=200))
def test_letters_and_spaces_never_change(text: str) -> None:
    assert redact_secrets(text) == text


@given(st.text(max_size=300))
def test_redaction_is_idempotent(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once
