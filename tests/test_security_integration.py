"""Security on the real paths users hit: memory_get and sync raced by a symlink swapper, state
modes after a real session, and redaction of every corpus secret in the index, exports and results.

`tests/test_fsio_races.py` proves the primitives; this module proves nothing bypasses them.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from cli_support import run_memoryd
from helpers import agent_for, index_for, write
from memoryd.core.engine import SearchRequest
from memoryd.errors import PathNotAllowed
from memoryd.orchestrator import MemoryService
from race_support import Swapper, exchange_unsupported, hammer, race_seconds
from redaction_corpus import LATER_CASES, SECRET_CASES, TYPED_CASES, leaked_fragments

NOTE = "# Note\n\nThe note inside memory.\n"
SECRET = "TOP-SECRET-OUTSIDE-CONTENT 7d1f0c2e\n"


@pytest.fixture
def scene(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\nInside.\n")
    write(ws / "memory" / "note.md", NOTE)
    outside = write(tmp_path / "outside" / "secret.md", SECRET)
    why = exchange_unsupported(ws / "memory")
    if why:
        pytest.skip(why)
    return ws, outside


def test_memory_get_through_the_service_never_serves_a_swapped_in_file(
    scene: tuple[Path, Path],
) -> None:
    ws, outside = scene
    decoy = ws / "memory" / "decoy.md"
    decoy.symlink_to(outside)
    from memoryd.config import validate_config

    svc = MemoryService(
        validate_config(
            {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}}}
        )
    )

    def one() -> str:
        got = svc.memory_get("memory/note.md")
        if got.get("disabled"):
            assert got["code"] == "path_not_allowed", got
            return "refused"
        assert "TOP-SECRET" not in got["text"], got
        return "served" if got["text"] == NOTE else "other"

    with Swapper("exchange", [(ws / "memory" / "note.md", decoy)]) as swapper:
        tally = hammer(race_seconds(), one, ())
    assert not tally.unexpected, tally.unexpected[:3]
    assert tally["refused"] > 0 and tally["other"] == 0 and swapper.rounds > 100
    assert one() == "served"  # refused while the note is renamed in a loop, served after
    svc.close()


def test_sync_never_indexes_a_swapped_in_file(scene: tuple[Path, Path]) -> None:
    ws, outside = scene
    decoy = ws / "memory" / "decoy.md"
    decoy.symlink_to(outside)
    idx = index_for(agent_for(ws, {"provider": "none"}), None)

    def one() -> str:
        write(ws / "memory" / "churn.md", f"# churn\n\n{os.urandom(4).hex()}\n")
        idx.notify_changed()
        idx.sync()
        rows = idx.store.conn.execute("select text from chunks").fetchall()
        assert not any("TOP-SECRET" in r[0] for r in rows)
        hits = idx.search(SearchRequest("TOP-SECRET-OUTSIDE-CONTENT"))
        assert not any("TOP-SECRET" in h.snippet for h in hits.results)
        return "synced"

    with Swapper("exchange", [(ws / "memory" / "note.md", decoy)]) as swapper:
        tally = hammer(min(race_seconds(), 3.0), one, ())
    assert not tally.unexpected, tally.unexpected[:3]
    assert tally["synced"] > 3 and swapper.rounds > 100
    idx.store.close()


def test_no_state_file_is_readable_by_another_user(tmp_path: Path, isolated_env: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n\nThe deploy target is fly.io.\n")
    sessions = isolated_env / "agents" / "main" / "sessions"
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
        'sources = ["memory", "sessions"]\nexperimental = { sessionMemory = true }\n'
    )
    env = {**os.environ, "MEMORYD_NO_SERVER": "1"}
    old = os.umask(0o022)
    try:
        for argv in (
            ["index"],
            ["search", "deploy"],
            ["flush-check", "--tokens", "190000", "--context-window", "200000"],
            ["status"],
        ):
            out = run_memoryd([*argv, "--config", str(cfg)], env=env, timeout=120)
            assert out.returncode == 0, (argv, out.stderr)
    finally:
        os.umask(old)
    checked = 0
    for path in isolated_env.rglob("*"):
        if path.is_relative_to(sessions):
            continue  # the host writes its transcripts itself
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_dir():
            assert mode == 0o700, (path, oct(mode))
        elif path.is_file():
            assert mode & 0o077 == 0, (path, oct(mode))
        checked += 1
    assert checked >= 5
    if os.geteuid() == 0:  # a real other user cannot read the index
        db = next(isolated_env.rglob("index.sqlite"))
        probe = subprocess.run(["cat", str(db)], user="nobody", capture_output=True)
        assert probe.returncode != 0


def test_every_corpus_secret_is_redacted_in_the_index_exports_and_results(
    tmp_path: Path, isolated_env: Path
) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n")
    qmd_agent = agent_for(
        ws,
        {
            "provider": "none",
            "sources": ["memory", "sessions"],
            "experimental": {"sessionMemory": True},
        },
        memory={"qmd": {"sessions": {"enabled": True}}},
    )
    folder = qmd_agent.state.sessions_dir
    folder.mkdir(parents=True)
    lines = [
        json.dumps({"type": "message", "message": {"role": "user", "content": case.text}})
        for case in SECRET_CASES
    ]
    (folder / "s1.jsonl").write_text("\n".join(lines) + "\n")

    idx = index_for(qmd_agent, None)
    idx.sync()
    stored = "\n".join(r[0] for r in idx.store.conn.execute("select text from chunks"))
    hits = []
    for case in SECRET_CASES:
        answer = idx.search(SearchRequest(case.text[:200], corpus="sessions"))
        hits.extend(r.snippet for r in answer.results)
    idx.store.close()
    db_bytes = qmd_agent.index_path.read_bytes().decode("utf-8", errors="replace")

    from datetime import UTC, datetime

    from memoryd.lifecycle.session_export import export_sessions

    report = export_sessions(qmd_agent, now=datetime.now(UTC))
    exported = (report.export_dir / "s1.md").read_text()

    leaks = {}
    for case in SECRET_CASES:
        for secret in case.secrets:
            for where, text in (
                ("chunks", stored),
                ("exports", exported),
                ("results", "\n".join(hits)),
            ):
                found = leaked_fragments(text, secret, width=12)
                if found:
                    leaks[(case.name, where)] = found[:2]
            assert secret not in db_bytes, (case.name, "index file")
    assert not leaks, leaks
    assert len(SECRET_CASES) >= 40


def test_typed_secrets_are_redacted_in_the_index_exports_and_results(
    tmp_path: Path, isolated_env: Path
) -> None:
    """The trial found search returning what people typed verbatim; each typed case is a user
    message here, after the question it answers when it has one."""
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n")
    agent = agent_for(
        ws,
        {
            "provider": "none",
            "sources": ["memory", "sessions"],
            "experimental": {"sessionMemory": True},
        },
        memory={"qmd": {"sessions": {"enabled": True}}},
    )
    agent.state.sessions_dir.mkdir(parents=True)
    lines = []
    from memoryd.core.redact import redact_secrets

    # what redaction itself misses (at most 2 %, tests/test_redact.py) is not this test's news
    cases = [
        c
        for c in TYPED_CASES + LATER_CASES
        if not any(
            leaked_fragments(redact_secrets(c.text, previous=c.previous), v) for v in c.secrets
        )
    ]
    assert len(cases) >= 0.98 * len(TYPED_CASES + LATER_CASES)
    for case in cases:
        # every case its own exchange: an unrelated assistant line, or the question it answers
        ask = case.previous or "Noted."
        lines.append({"type": "message", "message": {"role": "assistant", "content": ask}})
        lines.append({"type": "message", "message": {"role": "user", "content": case.text}})
    (agent.state.sessions_dir / "s1.jsonl").write_text("\n".join(map(json.dumps, lines)) + "\n")
    idx = index_for(agent, None)
    idx.sync()
    stored = "\n".join(r[0] for r in idx.store.conn.execute("select text from chunks"))
    hits = []
    for case in cases:
        answer = idx.search(SearchRequest(case.text[:120], corpus="sessions"))
        hits.extend(r.snippet for r in answer.results)
    idx.store.close()

    from datetime import UTC, datetime

    from memoryd.lifecycle.session_export import export_sessions

    exported = (export_sessions(agent, now=datetime.now(UTC)).export_dir / "s1.md").read_text()
    leaks = {}
    for case in cases:
        for secret in case.secrets:
            for where, text in (
                ("chunks", stored),
                ("exports", exported),
                ("results", "\n".join(hits)),
            ):
                found = leaked_fragments(text, secret, width=8)
                if found:
                    leaks[(case.name, where)] = found[:2]
    assert not leaks, leaks
    assert hits, "searches found the messages"


@pytest.mark.parametrize("redact_notes", [False, True])
def test_note_chunks_are_redacted_before_they_are_stored_when_asked(
    tmp_path: Path, redact_notes: bool
) -> None:
    secret = "Zebra" + "#2291q"
    ws = tmp_path / "ws"
    note = f"# Memory\n\nThe staging db password is {secret} until Friday.\n"
    write(ws / "MEMORY.md", note)
    search: dict[str, object] = {"provider": "none"}
    if redact_notes:
        search["redact"] = {"notes": True}
    agent = agent_for(ws, search)
    idx = index_for(agent, None)
    idx.sync()
    stored = "\n".join(r[0] for r in idx.store.conn.execute("select text from chunks"))
    hit = idx.search(SearchRequest("staging db password")).results[0].snippet
    got = idx.get("MEMORY.md")
    idx.store.close()
    assert got.text == note  # the note itself is the user's, as written
    if redact_notes:
        assert secret not in stored and secret not in hit
        assert "The staging db password is [REDACTED] until Friday." in stored
    else:
        assert secret in stored and secret in hit  # off by default: notes are stored as written


def test_turning_note_redaction_on_and_off_rebuilds_the_index(tmp_path: Path) -> None:
    secret = "Zebra" + "#2291q"
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", f"# Memory\n\nThe wifi password is {secret}.\n")

    def stored_with(search: dict[str, object]) -> str:
        idx = index_for(agent_for(ws, search), None)
        idx.sync()
        text = "\n".join(r[0] for r in idx.store.conn.execute("select text from chunks"))
        idx.store.close()
        return text

    assert secret in stored_with({"provider": "none"})
    assert secret not in stored_with({"provider": "none", "redact": {"notes": True}})
    assert secret in stored_with({"provider": "none"})


def test_get_never_reads_transcripts_or_their_exports(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    write(ws / "MEMORY.md", "# Memory\n")
    idx = index_for(agent_for(ws, {"provider": "none"}), None)
    for path in ("sessions/s1.jsonl", "qmd/sessions-main/s1.md", "../state/sessions.json"):
        with pytest.raises(PathNotAllowed):
            idx.get(path, None, None)
    idx.store.close()


def test_a_store_path_in_a_folder_of_the_users_choosing_leaves_that_folder_alone(
    tmp_path: Path, workspace: Path
) -> None:
    # `store.path = "/tmp/memory.sqlite"` (or one in the home folder) once made /tmp 0700:
    # memoryd's own folders are private, a folder the user chose is only used. The index file
    # itself is still 0600, and a folder memoryd has to create for it is made 0700.
    write(workspace / "MEMORY.md", "# Memory\n\nThe deploy target is fly.io.\n")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp
    idx = index_for(
        agent_for(workspace, {"provider": "none", "store": {"path": str(shared / "m.sqlite")}})
    )
    idx.sync()
    assert (idx.search(SearchRequest("deploy"))).results
    idx.close()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777
    assert stat.S_IMODE((shared / "m.sqlite").stat().st_mode) == 0o600
    made = tmp_path / "made" / "for" / "it" / "m.sqlite"
    idx = index_for(agent_for(workspace, {"provider": "none", "store": {"path": str(made)}}))
    idx.sync()
    idx.close()
    assert stat.S_IMODE(made.parent.stat().st_mode) == 0o700
