"""Scope rules: which sessions may search memory, case for case with OpenClaw's sendPolicy."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.config import ScopeConfig, validate_config
from memoryd.core.session_keys import ChatType, normalize_session_key, parse_session_key
from memoryd.errors import ConfigError
from memoryd.scope_rules import scope_denial


def scope(data: dict[str, Any]) -> ScopeConfig:
    out = validate_config({"memory": {"scope": data}}).memory.scope
    assert out is not None
    return out


def may_search(config: ScopeConfig | None, raw: str | None) -> bool:
    return scope_denial(config, raw) is None


def allow(**match: str) -> dict[str, Any]:
    return {"action": "allow", "match": match} if match else {"action": "allow"}


def deny(**match: str) -> dict[str, Any]:
    return {"action": "deny", "match": match} if match else {"action": "deny"}


def cfg(default: str | None, *rules: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"rules": list(rules)}
    if default is not None:
        out["default"] = default
    return out


ALLOW_SLACK_ONLY = {
    "default": "deny",
    "rules": [{"action": "allow", "match": {"channel": "slack"}}],
}
DENY_DISCORD_RAW = {
    "default": "allow",
    "rules": [{"action": "deny", "match": {"rawKeyPrefix": "agent:main:discord:"}}],
}
DENY_DISCORD_LEGACY = {
    "default": "allow",
    "rules": [{"action": "deny", "match": {"keyPrefix": "agent:main:discord:"}}],
}


# --------------------------------------------------------------------------- normalization


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        (None, ""),
        ("", ""),
        ("   ", ""),
        ("agent:main:main", "main"),
        ("  Agent:Main:Discord:Group:C1  ", "discord:group:c1"),
        ("agent:agent-1:workspace:channel:chan-123", "workspace:channel:chan-123"),
        ("Workspace:group:123", "workspace:group:123"),
        ("agent:main:cron:daily", "cron:daily"),
        ("agent:a:agent:b:slack:dm:x", "slack:dm:x"),  # nested prefixes all go
        ("agent:main: slack:dm:x ", "slack:dm:x"),  # blanks around the rest go too
        ("agent::slack:group:x", "agent::slack:group:x"),  # empty id: not a prefix
        ("agent: :slack:group:x", "agent: :slack:group:x"),  # blank id: not a prefix
        ("agent:main", "agent:main"),  # no rest: nothing to strip
        ("agent:main:", "agent:main:"),
        ("agent:", "agent:"),
        ("agent:main::group:x", ":group:x"),  # empty parts inside the rest are kept
        ("ÉQUIPE:Group:Ñandú", "équipe:group:ñandú"),
    ],
)
def test_normalize_trims_lowercases_and_strips_the_agent_prefix(
    raw: str | None, normalized: str
) -> None:
    assert normalize_session_key(raw) == normalized


# --------------------------------------------------------------------------- derivation


@pytest.mark.parametrize(
    ("raw", "channel", "chat_type", "is_chat"),
    [
        ("Workspace:group:123", "workspace", "group", True),
        ("agent:agent-1:workspace:channel:chan-123", "workspace", "channel", True),
        ("agent:agent-1:peer-direct", None, "direct", False),
        ("slack:channel:x", "slack", "channel", True),
        ("slack:direct:x", "slack", "direct", True),
        ("slack:dm:x", "slack", "direct", True),  # dm is a direct chat
        ("slack:DM:x", "slack", "direct", True),
        ("agent:main:discord:group:c1", "discord", "group", True),
        # The kind in second place names the channel; any `group` part then wins over `channel`.
        ("slack:channel:group", "slack", "group", True),
        ("slack:dm:channel", "slack", "channel", True),
        ("slack::group:x", "slack", "group", True),  # empty parts are skipped
        # A chat marker without a channel in front: a chat, but of unknown channel.
        ("agent:main:discord:acct1:group:c1", None, "group", True),
        ("agent:main:discord:acct1:direct:peer", None, "direct", True),
        ("agent:main:direct:peer", None, "direct", True),
        ("agent:main::group:x", None, "group", True),
        ("agent::slack:group:x", None, "group", True),  # empty agent id stays in the key
        # Not chats at all.
        ("agent:main:main", None, "direct", False),
        ("agent:main:cron:daily", None, "direct", False),
        ("agent:main:cron:group-digest", None, "direct", False),
        ("cli", None, "direct", False),
        ("agent:", None, "direct", False),
        ("agent:main", None, "direct", False),
        ("agent:main:subagent:abc", None, None, False),
        ("subagent:abc:group:x", None, None, False),
        (None, None, None, False),
        ("", None, None, False),
        ("  ", None, None, False),
        ("::::", None, "direct", False),
        ("ÉQUIPE:Group:Ñandú", "équipe", "group", True),
        ("团队:group:一", "团队", "group", True),
        ("x" * 10_000 + ":group:y", "x" * 10_000, "group", True),
        ("a:" + "b" * 10_000 + ":group:y", None, "group", True),
        ("slack:group:" + "y" * 10_000, "slack", "group", True),
    ],
)
def test_channel_and_chat_type_come_from_the_key(
    raw: str | None, channel: str | None, chat_type: ChatType | None, is_chat: bool
) -> None:
    info = parse_session_key(raw)
    assert (info.channel, info.chat_type, info.is_chat) == (channel, chat_type, is_chat)


# --------------------------------------------------------------------------- decisions


@pytest.mark.parametrize(
    ("raw", "allowed"),
    [
        (None, True),
        ("", True),
        ("  ", True),
        ("agent:main:main", True),
        ("agent:main:cron:daily", True),
        ("agent:main:subagent:abc", True),
        ("agent:agent-1:peer-direct", True),
        ("agent:main:telegram:direct:42", True),
        ("agent:main:slack:dm:u1", True),
        ("agent:main:direct:peer", True),
        ("agent:main:discord:acct1:direct:peer", True),
        ("agent:main:discord:group:c1", False),
        ("agent:agent-1:workspace:channel:chan-123", False),
        ("Workspace:group:123", False),
        ("agent:main:discord:acct1:group:c1", False),  # group without a channel: still a group
        ("agent:main::group:x", False),
        ("agent::slack:group:x", False),
    ],
)
def test_shipped_default_allows_only_direct_chats_and_non_chat_sessions(
    raw: str | None, allowed: bool
) -> None:
    assert may_search(None, raw) is allowed


@pytest.mark.parametrize(
    ("config", "raw", "allowed"),
    [
        (ALLOW_SLACK_ONLY, "slack:channel:x", True),
        (ALLOW_SLACK_ONLY, "slack:direct:x", True),
        (ALLOW_SLACK_ONLY, "slack:dm:x", True),
        (ALLOW_SLACK_ONLY, "slack:group:x", True),
        (ALLOW_SLACK_ONLY, "SLACK:channel:x", True),
        (ALLOW_SLACK_ONLY, "discord:channel:x", False),
        (ALLOW_SLACK_ONLY, "discord:dm:x", False),
        (ALLOW_SLACK_ONLY, "agent:main:discord:acct1:direct:peer", False),  # no channel ≠ slack
        # Non-chat sessions are never denied, whatever the rules.
        (ALLOW_SLACK_ONLY, "agent:main:main", True),
        (ALLOW_SLACK_ONLY, "agent:main:cron:daily", True),
        (ALLOW_SLACK_ONLY, None, True),
        (DENY_DISCORD_RAW, "agent:main:discord:group:c1", False),
        (DENY_DISCORD_RAW, "AGENT:MAIN:DISCORD:dm:u1", False),
        (DENY_DISCORD_RAW, "agent:main:slack:group:c1", True),
        (DENY_DISCORD_RAW, "agent:other:discord:group:c1", True),  # raw prefix names agent main
        (DENY_DISCORD_RAW, "discord:group:c1", True),  # raw key has no agent prefix
        (DENY_DISCORD_LEGACY, "agent:main:discord:group:c1", False),
        (DENY_DISCORD_LEGACY, "  Agent:Main:Discord:channel:c1", False),
        (DENY_DISCORD_LEGACY, "agent:main:slack:group:c1", True),
        (DENY_DISCORD_LEGACY, "agent:other:discord:group:c1", True),
        # Modern keyPrefix compares against the normalized key, case-insensitively.
        (cfg("allow", deny(keyPrefix="discord:")), "agent:main:discord:group:c1", False),
        (cfg("allow", deny(keyPrefix="Discord:")), "agent:any:discord:group:c1", False),
        (cfg("allow", deny(keyPrefix="discord:")), "agent:main:slack:group:c1", True),
        # Every match field must fit.
        (cfg("allow", deny(channel="discord", chatType="group")), "discord:group:c1", False),
        (cfg("allow", deny(channel="discord", chatType="group")), "discord:channel:c1", True),
        (cfg("allow", deny(channel="discord", chatType="group")), "slack:group:c1", True),
        (
            cfg("allow", deny(channel="discord", rawKeyPrefix="agent:w:")),
            "agent:w:discord:dm:u",
            False,
        ),
        (
            cfg("allow", deny(channel="discord", rawKeyPrefix="agent:w:")),
            "agent:v:discord:dm:u",
            True,
        ),
        # Channel names in config compare case-insensitively and trimmed.
        (cfg("deny", allow(channel=" Slack ")), "slack:group:c1", True),
        # Blank match values mean "not set".
        (cfg("deny", allow(channel="", keyPrefix=" ", rawKeyPrefix="")), "discord:group:c1", True),
        # First matching rule wins.
        (cfg(None, deny(chatType="group"), allow()), "slack:group:c1", False),
        (cfg(None, allow(), deny(chatType="group")), "slack:group:c1", True),
        # Rules without a default: allow when nothing matches.
        (cfg(None, deny(channel="discord")), "slack:group:c1", True),
        (cfg(None, deny(channel="discord")), "discord:group:c1", False),
        # An empty scope allows everything; a bare deny default denies every chat.
        ({}, "discord:group:c1", True),
        ({"default": "deny"}, "slack:dm:u1", False),
        ({"default": "deny"}, "agent:main:main", True),
        # A rule with no match (or an empty one) matches every chat.
        (cfg("allow", deny()), "slack:dm:u1", False),
        (cfg("allow", {"action": "deny", "match": {}}), "slack:dm:u1", False),
    ],
)
def test_configured_scope_decides_case_for_case(
    config: dict[str, Any], raw: str | None, allowed: bool
) -> None:
    assert may_search(scope(config), raw) is allowed


def test_denial_carries_what_was_derived_and_the_exact_log_line() -> None:
    assert scope_denial(None, "agent:main:discord:group:c1") == (
        "memory search denied by scope (channel=discord, chatType=group, "
        "session=agent:main:discord:group:c1)"
    )


def test_the_first_matching_rule_decides() -> None:
    assert not may_search(scope(DENY_DISCORD_RAW), "agent:main:discord:dm:u1")
    first_allows = {"default": "deny", "rules": [{"action": "allow"}, {"action": "deny"}]}
    assert may_search(scope(first_allows), "discord:group:c1")


def test_non_chat_sessions_are_allowed_without_consulting_rules() -> None:
    assert may_search(scope({"default": "deny", "rules": [{"action": "deny"}]}), "agent:main:main")


def test_log_line_uses_placeholders_for_unknown_parts() -> None:
    denial = scope_denial(scope({"default": "deny"}), "agent:main:discord:acct:group:c1")
    assert denial == (
        "memory search denied by scope (channel=unknown, chatType=group, "
        "session=agent:main:discord:acct:group:c1)"
    )
    assert scope_denial(None, None) is None


def test_log_line_cannot_be_forged_or_flooded_by_the_session_key() -> None:
    forged = scope_denial(None, "slack:group:x\nmemory search allowed by scope (…)")
    assert forged is not None and "\n" not in forged and "\\n" in forged
    flooded = scope_denial(None, "slack:group:" + "y" * 5000)
    assert flooded is not None and len(flooded) < 400 and flooded.endswith("…)")


# --------------------------------------------------------------------------- config


def test_scope_accepts_snake_case_keys() -> None:
    snake = scope({"rules": [{"action": "deny", "match": {"raw_key_prefix": "agent:main:"}}]})
    assert snake.rules is not None and snake.rules[0].match is not None
    assert snake.rules[0].match.raw_key_prefix == "agent:main:"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"default": "maybe"}, "memory.scope.default:"),
        ({"rules": [{"action": "permit"}]}, "memory.scope.rules.0.action:"),
        (
            {"rules": [{"match": {"channel": "slack"}}]},
            "memory.scope.rules.0.action: Field required",
        ),
        (
            {"rules": [{"action": "allow", "match": {"chatType": "dm"}}]},
            "memory.scope.rules.0.match.chatType:",
        ),
        (
            {"rules": [{"action": "allow", "match": {"chanel": "slack"}}]},
            "memory.scope.rules.0.match.chanel: unknown key",
        ),
        (
            {"rules": [{"action": "allow"}, {"action": "allow", "when": 1}]},
            "memory.scope.rules.1.when: unknown key",
        ),
        ({"defaults": "deny"}, "memory.scope.defaults: unknown key"),
        ({"rules": {"action": "allow"}}, "memory.scope.rules:"),
        ({"rules": [None]}, "memory.scope.rules.0:"),
    ],
)
def test_bad_scope_is_a_config_error_naming_the_path(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        scope(data)
    assert message in str(err.value)


def test_a_bad_scope_at_the_openclaw_location_is_named_there() -> None:
    with pytest.raises(ConfigError, match=r"memory\.qmd\.scope\.rules\.0\.action"):
        validate_config({"memory": {"qmd": {"scope": {"rules": [{"action": "nope"}]}}}})


def test_a_scope_that_is_not_a_table_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"memory\.scope:"):
        scope(["allow"])  # type: ignore[arg-type]


def test_scope_from_the_whole_config_file_feeds_evaluate() -> None:
    cfg = validate_config({"memory": {"qmd": {"scope": ALLOW_SLACK_ONLY}}})
    effective = cfg.memory.effective_scope
    assert may_search(effective, "slack:group:x")
    assert not may_search(effective, "discord:group:x")
    assert not may_search(validate_config({}).memory.effective_scope, "discord:group:x")


# --------------------------------------------------------------------------- properties

session_keys = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.lists(
        st.one_of(
            st.sampled_from(
                ["agent", "main", "group", "channel", "direct", "dm", "subagent", "Slack", "", " "]
            ),
            st.text(max_size=8),
        ),
        max_size=7,
    ).map(":".join),
)


@given(session_keys)
def test_normalization_is_idempotent(raw: str | None) -> None:
    once = normalize_session_key(raw)
    assert normalize_session_key(once) == once


@given(session_keys)
def test_parsing_a_normalized_key_derives_the_same_channel_and_chat_type(raw: str | None) -> None:
    info = parse_session_key(raw)
    again = parse_session_key(info.normalized)
    assert (again.channel, again.chat_type, again.is_chat) == (
        info.channel,
        info.chat_type,
        info.is_chat,
    )


@given(session_keys)
def test_the_shipped_default_is_the_documented_dms_only_scope(raw: str | None) -> None:
    documented = {
        "default": "deny",
        "rules": [{"action": "allow", "match": {"chatType": "direct"}}],
    }
    assert may_search(None, raw) is may_search(scope(documented), raw)


@given(session_keys, st.sampled_from([None, "allow", "deny"]))
def test_allow_everything_never_denies(raw: str | None, default: str | None) -> None:
    allow_all = scope({"default": default, "rules": [{"action": "allow"}]})
    assert may_search(allow_all, raw)


@given(session_keys)
def test_non_chat_keys_are_allowed_even_under_deny_everything(raw: str | None) -> None:
    deny_all = scope({"default": "deny", "rules": [{"action": "deny"}]})
    assert may_search(deny_all, raw) is (not parse_session_key(raw).is_chat)


README_EXAMPLE = """
[memory.scope]
default = "deny"

[[memory.scope.rules]]
action = "deny"
match = { rawKeyPrefix = "agent:work:" }

[[memory.scope.rules]]
action = "allow"
match = { chatType = "direct" }

[[memory.scope.rules]]
action = "allow"
match = { channel = "slack" }
"""


@pytest.mark.parametrize(
    ("raw", "allowed"),
    [
        ("agent:main:slack:group:x", True),
        ("agent:main:discord:dm:u", True),
        ("agent:main:discord:group:c", False),
        ("agent:work:telegram:dm:x", False),
        ("agent:work:slack:group:x", False),
        ("agent:work:main", True),
    ],
)
def test_the_documented_toml_example_behaves_as_described(raw: str, allowed: bool) -> None:
    effective = validate_config(tomllib.loads(README_EXAMPLE)).memory.effective_scope
    assert may_search(effective, raw) is allowed
