"""What a new user meets first: terminal-safe human output, one error prefix and exit codes as
documented, answers on stdout, and notes where a search would otherwise say nothing."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest

from cli_support import run_memoryd
from memoryd.cli import main

ESCAPES = "\x1b[2J\x1b]0;PWNED\x07\x9b31m"


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\n")
    (workspace / "memory" / "2026-11-29.md").write_text(
        f"# 2026-11-29\nzebra note {ESCAPES} end\ttab kept\n"
    )
    return workspace


@pytest.fixture
def keyword_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text('[agents.defaults.memorySearch]\nprovider = "none"\n')
    monkeypatch.setenv("MEMORYD_CONFIG", str(cfg))
    return cfg


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_terminal_safe(text: str) -> None:
    unsafe = [ch for ch in text if (ord(ch) < 32 and ch not in "\n\t") or 0x7F <= ord(ch) <= 0x9F]
    assert not unsafe, repr(text)


# ----------------------------------------------------------------------------- safe output


def test_search_shows_escape_sequences_instead_of_obeying_them(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(capsys, "search", "--workspace", str(ws), "zebra note")
    assert rc == 0
    assert_terminal_safe(out + err)
    assert r"zebra note \x1b[2J\x1b]0;PWNED\x07\x9b31m end" + "\ttab kept" in out


def test_json_output_keeps_the_text_as_it_is(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = run(capsys, "search", "--workspace", str(ws), "--json", "zebra note")
    assert rc == 0 and ESCAPES in json.loads(out)["results"][0]["snippet"]
    rc, out, _ = run(capsys, "get", "--workspace", str(ws), "--json", "memory/2026-11-29.md")
    assert rc == 0 and ESCAPES in json.loads(out)["text"]


def test_get_and_context_show_escapes(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (ws / "memory" / "2026-11-28.md").write_bytes(b"# a\rcarriage return " + ESCAPES.encode())
    rc, out, err = run(capsys, "get", "--workspace", str(ws), "memory/2026-11-28.md")
    assert rc == 0 and out == r"# a\x0dcarriage return \x1b[2J\x1b]0;PWNED\x07\x9b31m", out
    assert_terminal_safe(out + err)
    (ws / "MEMORY.md").write_text(f"# Memory\n{ESCAPES}\n")
    rc, out, err = run(capsys, "context", "--workspace", str(ws))
    assert rc == 0 and r"\x1b[2J" in out
    assert_terminal_safe(out + err)


def test_paths_and_reasons_in_status_index_and_errors_are_shown_safely(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (ws / "memory" / "evil\x1b[2J.md").write_bytes(b"\0binary")
    rc, out, err = run(capsys, "index", "--workspace", str(ws))
    assert rc == 0 and r"memory/evil\x1b[2J.md (not text: holds a NUL byte)" in out
    assert_terminal_safe(out + err)
    rc, out, err = run(capsys, "status", "--workspace", str(ws))
    assert rc == 0 and r"memory/evil\x1b[2J.md" in out
    assert_terminal_safe(out + err)
    rc, out, err = run(capsys, "get", "--workspace", str(ws), "memory/\x1b]0;x\x07.txt")
    assert rc == 2 and err.startswith("memoryd: error: ")
    assert_terminal_safe(out + err)


# ----------------------------------------------------------------------------- smaller things


def test_a_one_off_status_right_after_index_knows_when_it_synced(
    ws: Path, keyword_only: Path
) -> None:
    env = {**os.environ, "MEMORYD_NO_SERVER": "1"}
    assert run_memoryd(["index", "--workspace", str(ws)], env=env).returncode == 0
    st = run_memoryd(["status", "--json", "--workspace", str(ws)], env=env)
    assert json.loads(st.stdout)["builtin"]["lastSyncAt"] is not None
    human = run_memoryd(["status", "--workspace", str(ws)], env=env).stdout
    assert "last sync" in human and "never" not in human


def test_mcp_on_a_non_loopback_address_is_a_usage_error(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(capsys, "mcp", "--workspace", str(ws), "--http", "0.0.0.0:0")
    assert rc == 2 and out == ""
    assert err.startswith("memoryd: error: refusing to serve MCP on non-loopback address")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["mcp", "--http", "99999"],
        ["search", "--max-results", "lots", "q"],
        ["bogus-command"],
    ],
)
def test_argument_errors_use_the_same_prefix_as_every_other_error(argv: list[str]) -> None:
    got = run_memoryd(argv, env={**os.environ, "MEMORYD_NO_SERVER": "1"})
    assert got.returncode == 2
    assert got.stderr.startswith("memoryd: error: "), got.stderr
    assert len(got.stderr.splitlines()) == 1


def test_warm_answers_on_stdout(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(capsys, "warm", "--workspace", str(ws))
    assert rc == 0 and "[ok ]" in out and "[ok ]" not in err


def test_status_deep_shows_the_integrity_check(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(capsys, "index", "--workspace", str(ws))[0] == 0
    rc, out, _ = run(capsys, "status", "--deep", "--workspace", str(ws))
    assert rc == 0 and "index check" in out and "ok (integrity and counts verified" in out


def test_help_texts_end_in_one_punctuation_mark(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["flush-check", "--help"])
    out = capsys.readouterr().out
    assert "now?" in out and "now?." not in out


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_a_command_parses_and_helps_alike_with_only_its_own_subparser_built() -> None:
    """`main` builds only the command it runs: its help, defaults and errors are those of the
    whole parser, which `memoryd --help` and an unknown command still get."""
    from memoryd.cli import COMMANDS, _parser

    whole = _commands(_parser())
    assert set(whole) == set(COMMANDS)
    for name in COMMANDS:
        own = _commands(_parser(name))
        assert list(own) == [name]
        assert own[name].format_help() == whole[name].format_help(), name
    args = ["search", "--json", "--max-results", "3", "postgres"]
    assert vars(_parser("search").parse_args(args)) == vars(_parser().parse_args(args))


def test_searching_sessions_that_are_not_indexed_says_so(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(capsys, "search", "--workspace", str(ws), "--corpus", "sessions", "deploy")
    assert rc == 0 and out.startswith("no matches")
    assert "note: session transcripts are not indexed for agent main" in err
    assert "memorySearch.sources" in err
    rc, out, _ = run(capsys, "search", "--json", "--workspace", str(ws), "--corpus", "memory", "x")
    assert not any("session" in n for n in json.loads(out)["notes"])


def test_search_dash_reads_the_query_from_stdin(ws: Path, keyword_only: Path) -> None:
    got = run_memoryd(
        ["search", "--json", "--workspace", str(ws), "-"],
        env={**os.environ, "MEMORYD_NO_SERVER": "1"},
        input="deploy target\n",
    )
    assert got.returncode == 0, got.stderr
    assert [r["path"] for r in json.loads(got.stdout)["results"]] == ["MEMORY.md"]


@pytest.mark.parametrize("query", ["x", "a b", "I"])
def test_a_query_of_lone_letters_finds_nothing_and_says_why(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str], query: str
) -> None:
    (ws / "memory" / "x.md").unlink(missing_ok=True)
    (ws / "memory" / "2026-11-30.md").write_text("# Notes\n- x marks the spot\n- a b c\n- I x I\n")
    rc, out, _ = run(capsys, "search", "--json", "--workspace", str(ws), query)
    data = json.loads(out)
    assert rc == 0 and data["results"] == []
    assert any("no word of two or more letters" in n for n in data["notes"])


def test_an_unknown_agent_without_config_asks_for_create(
    ws: Path, keyword_only: Path, capsys: pytest.CaptureFixture[str], isolated_env: Path
) -> None:
    rc, out, err = run(capsys, "search", "--workspace", str(ws), "--agent", "ghost", "deploy")
    assert rc == 1 and out == ""
    assert err.startswith("memoryd: error: agent 'ghost' has no state yet") and "--create" in err
    assert not (isolated_env / "agents" / "ghost").exists()  # nothing was built
    rc, _, err = run(capsys, "index", "--workspace", str(ws), "--agent", "ghost", "--create")
    assert rc == 0, err
    rc, out, _ = run(capsys, "search", "--workspace", str(ws), "--agent", "ghost", "deploy")
    assert rc == 0 and "MEMORY.md" in out  # known from now on
    rc, _, _ = run(capsys, "search", "--workspace", str(ws), "deploy")  # main needs no --create
    assert rc == 0


def test_the_cli_process_prints_no_escape_from_a_note(ws: Path, keyword_only: Path) -> None:
    got = run_memoryd(
        ["search", "--workspace", str(ws), "zebra"],
        env={**os.environ, "MEMORYD_NO_SERVER": "1"},
    )
    assert got.returncode == 0 and "\x1b" not in got.stdout + got.stderr, got.stdout
