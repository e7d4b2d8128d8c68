"""Session transcripts: parsing, sanitising, chunk line mapping, opt-in, isolation and the
delta thresholds that trigger a background sync."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import helpers
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.core.chunking import Chunk
from memoryd.core.transcripts import (
    chunk_transcript,
    parse_transcript_text,
    sanitize_text,
    transcript_due,
)
from memoryd.lifecycle.session_export import parse_transcript, session_id
from memoryd.memfiles import list_transcripts, transcript_display_path

FAKE_KEY = "sk-" + "proj-" + "Ab3De5Fg7Hj9Kl1Mn2Pq4Rs6Tu8Vw0Xy"


def msg(role: str, *texts: str, **extra: Any) -> str:
    content = [{"type": "text", "text": t} for t in texts]
    return json.dumps({"type": "message", "message": {"role": role, "content": content}, **extra})


def transcript_chunks(path: Path, tokens: int, overlap: int) -> list[Chunk]:
    return chunk_transcript(
        parse_transcript(path, sanitize=True)[0], tokens=tokens, overlap=overlap
    )


def agent_for(ws: Path, agent_id: str = "main") -> ResolvedAgent:
    return helpers.agent_for(ws, agent_id=agent_id, agents=[{"id": "main"}, {"id": "other"}])


def write_transcript(agent: ResolvedAgent, name: str, lines: list[str], *, end: str = "\n") -> Path:
    folder = agent.state.sessions_dir
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


SAMPLE = [
    json.dumps({"type": "session", "id": "s1", "cwd": "/w"}),
    msg("user", "How do I   deploy\n\nthe   zeppelin?"),
    "{this is not json",
    msg("assistant", "Use the blue button.", "Then wait."),
    json.dumps(
        {
            "type": "message",
            "message": {"role": "toolResult", "content": [{"type": "text", "text": "tool"}]},
        }
    ),
    json.dumps(
        {
            "type": "message",
            "message": {
                "role": "assistant",
                "content": [{"type": "toolCall", "name": "x"}, {"type": "image", "data": "..."}],
            },
        }
    ),
    "[1, 2, 3]",
    "",
    json.dumps({"type": "message", "role": "user", "content": "flat record form"}),
    json.dumps({"type": "custom", "message": {"role": "user", "content": "not a message record"}}),
]


def test_parses_user_and_assistant_text_with_jsonl_line_numbers(workspace: Path) -> None:
    agent = agent_for(workspace)
    path = write_transcript(agent, "s1.jsonl", SAMPLE)
    messages, malformed, lines = parse_transcript(path)
    assert [(m.role, m.text, m.line_no) for m in messages] == [
        ("user", "How do I deploy the zeppelin?", 2),
        ("assistant", "Use the blue button. Then wait.", 4),
        ("user", "flat record form", 9),
    ]
    assert malformed == 2  # the broken line and the JSON array
    assert lines == len(SAMPLE)
    assert session_id(path) == "s1"


def test_a_half_written_last_line_is_neither_parsed_nor_malformed() -> None:
    text = msg("user", "complete") + "\n" + msg("assistant", "partial")[:20]
    messages, malformed, lines = parse_transcript_text(text)
    assert [m.text for m in messages] == ["complete"]
    assert (malformed, lines) == (0, 1)


def test_a_complete_last_line_without_newline_counts() -> None:
    text = msg("user", "a") + "\n" + msg("assistant", "b")
    messages, malformed, lines = parse_transcript_text(text)
    assert [(m.text, m.line_no) for m in messages] == [("a", 1), ("b", 2)]
    assert (malformed, lines) == (0, 2)


def test_invalid_utf8_and_garbage_never_raise(workspace: Path) -> None:
    agent = agent_for(workspace)
    agent.state.sessions_dir.mkdir(parents=True)
    path = agent.state.sessions_dir / "bad.jsonl"
    path.write_bytes(b"\xff\xfe garbage\n" + msg("user", "still here").encode() + b"\n\x00\x01\n")
    messages, malformed, _ = parse_transcript(path)
    assert [m.text for m in messages] == ["still here"]
    assert malformed == 2


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("<system-reminder>internal stuff</system-reminder>Hello there", "Hello there"),
        ("<thinking>\nplan\nplan\n</thinking>\nThe answer is 4.", "The answer is 4."),
        ("<think>hidden</think>Shown", "Shown"),
        ("[[reply_to_current]] Sure, done.", "Sure, done."),
        ("[[reply_to: 12345]]Noted.", "Noted."),
        ("[[audio_as_voice]] hi", "hi"),
        ("<final>Wrapped answer</final>", "Wrapped answer"),
        ("[Telegram Alice id:42 +2m 2026-11-29 10:00 UTC] what's up", "what's up"),
        ("hello [message_id: 991]", "hello"),
        (
            'Conversation info (untrusted metadata):\n```json\n{"sender": "bob"}\n```\nreal question',
            "real question",
        ),
        (f"my key is {FAKE_KEY}", "my key is [REDACTED]"),
        ("Authorization: Bearer abcdefghijklmnop123456", "Authorization: Bearer [REDACTED]"),
        ("a [[wiki link]] stays, [x] checkbox stays", "a [[wiki link]] stays, [x] checkbox stays"),
        ("<b>html</b> stays", "<b>html</b> stays"),
        ("<thinking>never closed", ""),
    ],
)
def test_sanitising_strips_metadata_directives_thinking_and_secrets(raw: str, clean: str) -> None:
    assert " ".join(sanitize_text(raw).split()) == clean


def test_sanitised_parsing_drops_silent_assistant_turns() -> None:
    text = (
        "\n".join(
            [
                msg("user", "flush now"),
                msg("assistant", "NO_REPLY"),
                msg("assistant", "HEARTBEAT_OK"),
                msg("user", "ok"),
            ]
        )
        + "\n"
    )
    kept, _, _ = parse_transcript_text(text, sanitize=True)
    assert [m.text for m in kept] == ["flush now", "ok"]
    raw, _, _ = parse_transcript_text(text, sanitize=False)
    assert len(raw) == 4


def test_chunks_render_roles_and_map_back_to_jsonl_lines(workspace: Path) -> None:
    agent = agent_for(workspace)
    path = write_transcript(agent, "s1.jsonl", SAMPLE)
    (chunk,) = transcript_chunks(path, tokens=400, overlap=80)
    assert chunk.text == (
        "User: How do I deploy the zeppelin?\nAssistant: Use the blue button. Then wait.\n"
        "User: flat record form"
    )
    assert (chunk.start_line, chunk.end_line) == (2, 9)
    assert len(chunk.hash) == 64


def test_long_transcripts_split_into_chunks_with_line_ranges_in_order(workspace: Path) -> None:
    agent = agent_for(workspace)
    lines = [json.dumps({"type": "session"})]
    for i in range(60):
        lines.append(
            msg("user" if i % 2 == 0 else "assistant", f"message number {i} " + "word " * 30)
        )
        lines.append(json.dumps({"type": "custom"}))
    path = write_transcript(agent, "long.jsonl", lines)
    chunks = transcript_chunks(path, tokens=120, overlap=20)
    assert len(chunks) > 5
    valid = {i + 1 for i, ln in enumerate(lines) if '"message"' in ln}
    for c in chunks:
        assert c.start_line in valid and c.end_line in valid
        assert c.start_line <= c.end_line
        first = c.text.split("\n", 1)[0]
        n = int(first.split("message number ")[1].split()[0])
        assert c.start_line == 2 + 2 * n  # the first message of the chunk sits on this line
    assert chunks[0].start_line == 2 and chunks[-1].end_line == 2 + 2 * 59


def test_a_transcript_with_no_text_has_no_chunks(workspace: Path) -> None:
    agent = agent_for(workspace)
    path = write_transcript(agent, "empty.jsonl", [json.dumps({"type": "session"})])
    assert transcript_chunks(path, tokens=400, overlap=80) == []


def test_session_ids_and_display_paths() -> None:
    p = Path("/x/sessions/abc-123.jsonl")
    assert session_id(p) == "abc-123"
    assert transcript_display_path(p) == "sessions/abc-123.jsonl"


@pytest.mark.parametrize(
    ("search", "enabled"),
    [
        ({}, False),
        ({"experimental": {"sessionMemory": True}}, False),
        ({"sources": ["memory", "sessions"]}, False),
        ({"experimental": {"sessionMemory": True}, "sources": ["memory", "sessions"]}, True),
        ({"experimental": {"sessionMemory": True}, "sources": ["sessions"]}, True),
    ],
)
def test_session_memory_is_opt_in_on_both_keys(
    workspace: Path, search: dict[str, Any], enabled: bool
) -> None:
    agent = resolve_agent(
        validate_config({"agents": {"defaults": {"memorySearch": search}}}),
        "main",
        workspace=workspace,
    )
    assert agent.sessions_enabled is enabled


def test_an_agent_lists_only_its_own_transcripts(workspace: Path) -> None:
    main, other = agent_for(workspace, "main"), agent_for(workspace, "other")
    write_transcript(main, "m1.jsonl", [msg("user", "main secret plan")])
    write_transcript(other, "o1.jsonl", [msg("user", "other agent's plan")])
    write_transcript(main, "notes.txt", ["not a transcript"])
    (main.state.sessions_dir / "link.jsonl").symlink_to(other.state.sessions_dir / "o1.jsonl")
    assert [p.name for p in list_transcripts(main.state.sessions_dir)] == ["m1.jsonl"]
    assert [p.name for p in list_transcripts(other.state.sessions_dir)] == ["o1.jsonl"]
    texts = [
        m.text for p in list_transcripts(main.state.sessions_dir) for m in parse_transcript(p)[0]
    ]
    assert texts == ["main secret plan"]


def test_no_sessions_folder_means_no_transcripts(workspace: Path) -> None:
    assert list_transcripts(agent_for(workspace).state.sessions_dir) == []


# ---------------------------------------------------------------- delta tracking


def test_delta_becomes_due_at_the_byte_threshold() -> None:
    assert not transcript_due(999, 3, 1000, 0)
    assert transcript_due(1000, 4, 1000, 0)
    assert not transcript_due(0, 0, 1000, 0)
    assert not transcript_due(500, 5, 1000, 0)


def test_delta_becomes_due_at_the_message_threshold() -> None:
    assert not transcript_due(10, 49, 0, 50)
    assert transcript_due(11, 50, 0, 50)


def test_either_threshold_is_enough_with_the_defaults() -> None:
    sessions = validate_config({}).agents.defaults.memory_search.sync.sessions
    deltas = (sessions.delta_bytes, sessions.delta_messages)
    assert deltas == (100_000, 50)
    assert transcript_due(5_000, 50, *deltas)
    assert transcript_due(100_000, 2, *deltas)
    assert not transcript_due(99_999, 49, *deltas)


def test_both_thresholds_off_means_any_growth_is_due() -> None:
    assert not transcript_due(0, 0, 0, 0)
    assert transcript_due(1, 0, 0, 0)


@pytest.mark.parametrize(
    "record",
    [
        {
            "type": "message",
            "provenance": {"kind": "inter_session"},
            "message": {"role": "user", "content": "relayed from another session"},
        },
        {
            "type": "message",
            "message": {
                "role": "user",
                "content": "relayed too",
                "provenance": {"kind": "inter_session"},
            },
        },
    ],
    ids=["on-the-record", "on-the-message"],
)
def test_inter_session_relays_are_not_the_users_words(record: dict[str, object]) -> None:
    # OpenClaw's rule: a user message with provenance.kind "inter_session" was relayed between
    # sessions or sub-agents; it is not indexed as something the user said.
    own = {"type": "message", "message": {"role": "user", "content": "my own words"}}
    text = "\n".join(json.dumps(r) for r in (record, own)) + "\n"
    messages, malformed, _ = parse_transcript_text(text)
    assert [m.text for m in messages] == ["my own words"] and malformed == 0
