"""Secret redaction: secret formats that must vanish whole, ordinary text that must stay as written.

Fake secrets are assembled at run time so no secret-shaped literal sits in the repository. The
≥ 40-format corpus and the ordinary-notes corpus live in `redaction_corpus.py` (shared with
`bench/bench_redact.py`); the tables below pin exact outputs.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from importlib.resources import files

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memoryd.core.redact import REDACTED, redact_secrets, secret_spans
from redaction_corpus import (
    DEVELOPER_NOTES,
    EVERYDAY_LOOKALIKES,
    LATER_CASES,
    SECRET_CASES,
    TRIAL_MISSES,
    TYPED_CASES,
    SecretCase,
    TypedCase,
    cisi_abstracts,
    cranfield_abstracts,
    demo_notes,
    innocent_corpus,
    leaked_fragments,
    locomo_turns,
)

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


# --- the corpus: every format, fully ------------------------------------------------------------


def test_the_corpus_has_forty_formats_and_every_miss_of_the_trial() -> None:
    names = [c.name for c in SECRET_CASES]
    assert len(set(names)) == len(names) >= 40
    assert set(TRIAL_MISSES) <= set(names)


@pytest.mark.parametrize("case", SECRET_CASES, ids=[c.name for c in SECRET_CASES])
def test_every_corpus_format_is_redacted_without_a_fragment_left(case: SecretCase) -> None:
    out = redact_secrets(case.text)
    for secret in case.secrets:
        assert leaked_fragments(out, secret) == []
    for context in case.keep:
        assert context in out
    assert REDACTED in out
    assert redact_secrets(out) == out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # the trial cut this one at the first `@`, leaving half the password
        (
            j("mongodb+srv://app:", "p@ss", "@w0rd", "@cluster0.x1y2z.mongodb.net/prod"),
            f"mongodb+srv://app:{REDACTED}@cluster0.x1y2z.mongodb.net/prod",
        ),
        (
            j("the root password is ", "Tr0ub4dor&3", " and sudo asks twice"),
            f"the root password is {REDACTED} and sudo asks twice",
        ),
        (j("my Mistral key is ", B62, "."), f"my Mistral key is {REDACTED}."),
        (
            j("AccountName=acme;AccountKey=", B62, B62, "==;EndpointSuffix=core.windows.net"),
            f"AccountName=acme;AccountKey={REDACTED};EndpointSuffix=core.windows.net",
        ),
        (
            j('"private_key_id": "', "0123456789abcdef" * 2, "01234567", '"'),
            f'"private_key_id": "{REDACTED}"',
        ),
        # offsets stay right after multi-byte characters (RE2 matches UTF-8 bytes)
        (j("東京 é dop_v1_", "0123456789abcdef" * 4, " ok"), f"東京 é {REDACTED} ok"),
        (j("東京 api_key=", "abcdef123456", " 東京"), f"東京 api_key={REDACTED} 東京"),
    ],
)
def test_formats_the_trial_missed_are_redacted_exactly(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


def test_gitleaks_rules_do_the_provider_formats() -> None:
    """The maintained ruleset is in use: a format only gitleaks knows is found by its rule."""
    token = j("glpat-", B62[:20])
    assert {s.rule for s in secret_spans(f"token {token} ok")} >= {"gitlab-pat"}
    text = j("Shopify ", "shpat_", "0123456789abcdef" * 2)
    assert "shopify-access-token" in {s.rule for s in secret_spans(text)}


def test_the_vendored_ruleset_is_gitleaks_byte_for_byte() -> None:
    """Below its provenance header, gitleaks.toml is the upstream file the header names."""
    raw = files("memoryd.core.redact").joinpath("gitleaks.toml").read_text("utf-8")
    header, _, upstream = raw.partition("# " + "-" * 96 + "\n")
    assert upstream.startswith("# This file has been auto-generated.")
    assert hashlib.sha256(upstream.encode("utf-8")).hexdigest() in header


def test_importing_memoryd_does_not_load_the_ruleset() -> None:
    """The CLI imports redaction; RE2 and the ruleset load only when text is first redacted."""
    code = (
        "import sys, memoryd.cli, memoryd.core.redact as r\n"
        "assert 're2' not in sys.modules, 'RE2 loaded at import'\n"
        "r.redact_secrets('x')\n"
        "assert 're2' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --- ordinary notes: nothing changes ------------------------------------------------------------


@pytest.mark.parametrize("text", DEVELOPER_NOTES)
def test_developer_look_alikes_are_left_alone(text: str) -> None:
    assert secret_spans(text) == []


@pytest.mark.parametrize(
    "load",
    [locomo_turns, cranfield_abstracts, cisi_abstracts, demo_notes],
    ids=["locomo", "cranfield", "cisi", "demo"],
)
def test_real_prose_has_no_false_positives(load: object) -> None:
    assert callable(load)
    texts: list[str] = load()
    if not texts:
        pytest.skip("shared eval data is not on this machine")
    changed = [t for t in texts if redact_secrets(t) != t]
    assert changed == []


@pytest.mark.parametrize("text", EVERYDAY_LOOKALIKES)
def test_everyday_look_alikes_of_typed_secrets_are_left_alone(text: str) -> None:
    assert [(text[a:b], rule) for a, b, rule in secret_spans(text)] == []


# --- what people type -------------------------------------------------------------------------

# The trial's misses, word for word (each one was returned verbatim by search).
TYPED_BY_THE_TRIAL = [
    (j("redis://:", "R3disP4ss", "@cache"), f"redis://:{REDACTED}@cache"),
    (
        j("the password for the staging db is ", "s3cr3t!Pass"),
        f"the password for the staging db is {REDACTED}",
    ),
    (j("the pass is ", "Zebra#2291q"), f"the pass is {REDACTED}"),
    (j("use ", "Qwerty!7788", " as the admin password"), f"use {REDACTED} as the admin password"),
    (j("mein Passwort ist ", "Geheim123!x"), f"mein Passwort ist {REDACTED}"),
    (
        j("sshpass -p '", "Zx9kLm2pQ", "' ssh root@10.0.0.5"),
        f"sshpass -p '{REDACTED}' ssh root@10.0.0.5",
    ),
    (
        j("the passphrase is ", "velvet orbit cactus meadow"),
        f"the passphrase is {REDACTED}",
    ),
    (j("my PIN is ", "4821"), f"my PIN is {REDACTED}"),
    (j("card ", "4945 8073 0215 7365", " exp 09/27"), f"card {REDACTED} exp 09/27"),
    # the second, independent fixture: a bare AWS secret key, a Vault token (hvs. + 24)
    (
        j(
            "sandbox: ",
            "AKIA",
            "Q7X2MB3LPZ4KD6RH",
            " / ",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCY3xAmPlEkEy",
        ),
        f"sandbox: {REDACTED} / {REDACTED}",
    ),
    (j("vault login ", "hvs.", "aB3dE5fG7hJ9kL1mN2pQ4rS6x"), f"vault login {REDACTED}"),
]


@pytest.mark.parametrize(("text", "expected"), TYPED_BY_THE_TRIAL)
def test_what_the_trial_typed_is_redacted(text: str, expected: str) -> None:
    assert redact_secrets(text) == expected


@pytest.mark.parametrize(
    ("previous", "reply", "expected"),
    [
        ("what's the root password?", j("Tr0ub4dor", "&3"), REDACTED),
        ("What's the wifi password?", j("it's ", "Zebra#2291q"), f"it's {REDACTED}"),
        ("password?", j("sunflower", "meadow"), REDACTED),  # a lone word answers it
        ("Wie lautet das Passwort?", j("Geheim", "123!x"), REDACTED),
        ("密码是多少？", j("Zebra#", "2291q"), REDACTED),
        ("and the passphrase?", "velvet orbit cactus meadow", REDACTED),
        ("what's the PIN for the garage?", "4821", REDACTED),
        # not an answer to a password question, or not a password
        ("what's the plan for today?", j("Zebra#", "2291q"), REDACTED),  # its shape alone
        ("what's the root password?", "I don't know, ask Bob", "I don't know, ask Bob"),
        ("what's the root password?", "sorry", "sorry"),
        ("what's the root password?", "it's on the fridge", "it's on the fridge"),
        ("Password reset done.", "great, thanks", "great, thanks"),
    ],
)
def test_a_reply_to_a_password_question_is_redacted(
    previous: str, reply: str, expected: str
) -> None:
    assert redact_secrets(reply, previous=previous) == expected


def test_a_reply_to_a_password_question_is_redacted_in_a_transcript() -> None:
    from memoryd.core.transcripts import parse_transcript_text

    secret = j("Tr0ub4", "dor&3x")
    lines = [
        {
            "type": "message",
            "message": {"role": "assistant", "content": "What's the root password?"},
        },
        {"type": "message", "message": {"role": "user", "content": secret}},
        {"type": "message", "message": {"role": "assistant", "content": "Thanks, logging in."}},
    ]
    text = "\n".join(__import__("json").dumps(line) for line in lines) + "\n"
    messages, _malformed, _count = parse_transcript_text(text, sanitize=True)
    assert [m.text for m in messages] == [
        "What's the root password?",
        REDACTED,
        "Thanks, logging in.",
    ]
    raw, _, _ = parse_transcript_text(text, sanitize=False)
    assert raw[1].text == secret


@pytest.mark.parametrize(
    ("number", "card"),
    [
        ("4945 8073 0215 7365", True),  # Visa, Luhn right
        ("4945 8073 0215 7366", False),  # one digit off
        ("4945807302157365", True),
        ("4945-8073-0215-7365", True),
        ("4945 8073-0215 7365", False),  # mixed separators: not how cards are printed
        ("3714 496353 98431", True),  # Amex 4-6-5
        ("1701 2345 6789 0128", False),  # no card network starts with 1
        ("49 4580 7302 1573 65", False),  # grouped otherwise
    ],
)
def test_card_numbers_need_a_network_prefix_their_grouping_and_the_luhn_digit(
    number: str, card: bool
) -> None:
    assert (redact_secrets(f"pay with {number} today") != f"pay with {number} today") is card


def test_the_corpus_of_typed_secrets_is_large_and_varied() -> None:
    names = [c.name for c in TYPED_CASES]
    assert len(set(names)) == len(names) and len(TYPED_CASES) + len(LATER_CASES) >= 150
    languages = {n.split("-")[0] for n in names}
    assert {"en", "de", "fr", "es", "zh", "ja", "url", "cli", "qa", "card", "vault"} <= languages


@pytest.mark.parametrize("case", TYPED_CASES, ids=[c.name for c in TYPED_CASES])
def test_every_typed_secret_is_redacted_and_its_sentence_kept(case: TypedCase) -> None:
    out = redact_secrets(case.text, previous=case.previous)
    for secret in case.secrets:
        assert leaked_fragments(out, secret) == [], out
    for context in case.keep:
        assert context in out, out
    assert redact_secrets(out, previous=case.previous) == out


def test_at_least_98_percent_of_all_typed_secrets_are_caught() -> None:
    """Over every typed case, the later ones included (docs/redaction.md has the figure)."""
    cases = TYPED_CASES + LATER_CASES
    missed = [
        c.name
        for c in cases
        if any(leaked_fragments(redact_secrets(c.text, previous=c.previous), s) for s in c.secrets)
    ]
    assert 1 - len(missed) / len(cases) >= 0.98, missed


def test_at_most_half_a_percent_of_ordinary_messages_change() -> None:
    corpus = innocent_corpus()
    texts = [t for texts in corpus.values() for t in texts]
    if not corpus["locomo-turns"]:
        pytest.skip("shared eval data is not on this machine")
    assert len(texts) >= 4000
    changed = [t for t in texts if redact_secrets(t) != t]
    assert len(changed) / len(texts) <= 0.005, changed[:10]


# --- robustness ---------------------------------------------------------------------------------

_SHAPES = [c.text for c in SECRET_CASES] + list(DEVELOPER_NOTES)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_SHAPES), st.text(max_size=40)), max_size=6))
def test_redaction_is_idempotent_on_mixed_secrets_and_text(parts: list[str]) -> None:
    text = " ".join(parts)
    once = redact_secrets(text)
    assert redact_secrets(once) == once


MB = 1_000_000

# Shapes that make a backtracking matcher go quadratic or worse: long runs of key characters,
# repeated key words and openers without their closers. Today's RE2 + anchored local rules take
# about a second per megabyte here; the frozen old rules take minutes on 100 kB of `x_`.
ADVERSARIAL = {
    "identifier-run": "x_" * (MB // 2),
    "dash-run": "a-" * (MB // 2),
    "repeated-key-words": "api_key token secret password " * (MB // 30),
    "key-without-value": "token=" * (MB // 6),
    "private-key-openers": "-----BEGIN RSA PRIVATE KEY-----" * (MB // 31),
    "url-of-ats": "mongodb://u:" + "@" * MB,
    "scheme-repeat": "a://b:" * (MB // 6),
    "curl-then-lines": "curl " + "a \n" * (MB // 3),
    "password-is-repeat": "the password is " * (MB // 16),
    "prefixes-without-bodies": "sk-ant- ghp_ AKIA xoxb- eyJ hf_ gsk_ whsec_ " * (MB // 42),
    "unicode-with-secrets": ("東京 api_key=abcdef123456 " * (MB // 26)),
    # the rules for what people type: tools named without their flag, password words without
    # a value, digit runs, token runs, user/password pairs that never close
    "tools-without-flags": "mysql curl sshpass docker login redis-cli sqlcmd zip " * (MB // 54),
    "password-for-the": "password for the " * (MB // 17),
    "digit-run": "4" * MB,
    "grouped-digits": "4111 " * (MB // 5),
    "token-run": ("aB3" * (MB // 3)),
    "slashed-token-run": "Ab1/" * (MB // 4),
    "pairs-without-values": "root / login: admin / " * (MB // 22),
    "symbols-and-digits": "Ab1!" * (MB // 4),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("text", ADVERSARIAL.values(), ids=ADVERSARIAL.keys())
def test_a_megabyte_adversarial_line_finishes_quickly(text: str) -> None:
    redact_secrets("warm up the ruleset")
    started = time.process_time()
    redact_secrets(text)
    # generous: ~20x today's cost on a loaded 2-core machine; quadratic would take hours
    assert time.process_time() - started < 20
