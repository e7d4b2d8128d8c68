"""`memoryd forget` and `memoryd reset` on the built-in index: real files, real SQLite, real CLI.

The qmd side is in test_forget_qmd.py; the pure tombstone rules are tested first.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from cli_support import run_memoryd
from memoryd.config import validate_config
from memoryd.core.forgotten import Tombstones, scrub_messages
from memoryd.core.transcripts import Message
from memoryd.errors import MemoryWriteFailed, PathNotAllowed, WorkspaceReadOnly
from memoryd.lifecycle.forget import forget_lines, load_tombstones, select_lines
from memoryd.lifecycle.writes import append_memory
from memoryd.orchestrator import MemoryService

FACT = "Alice's favourite tea shop is Kettle and Crumb on Harbour Street."
MEMORY = f"# Memory\n\n- {FACT}\n- Deploys go out on Fridays after the standup.\n- The staging database lives in eu-west-3.\n"
CHAT = f"By the way, as I said before: {FACT.lower()} Also bring the cake to the office."


# --------------------------------------------------------------------------- tombstones (pure)


def test_the_same_text_inside_a_longer_message_is_cut_out_and_the_rest_kept() -> None:
    t = Tombstones().with_lines([f"- {FACT}"])
    msgs = [Message("user", CHAT, 3), Message("assistant", "Noted, the cake it is.", 4)]
    out = scrub_messages(msgs, t)
    assert "kettle" not in out[0].text and "tea shop" not in out[0].text
    assert out[0].text == "Also bring the cake to the office."
    assert out[1] is msgs[1]  # untouched messages are the same objects


@pytest.mark.parametrize(
    "text",
    [
        "ALICE S favourite tea shop is",  # a shingle, whatever the case and punctuation
        "Reminder —  Alice’s   favourite tea shop is Kettle, ok?",
        "the shop: Alice's favourite tea shop is Kettle and Crumb",
    ],
)
def test_quoted_fragments_of_six_words_are_caught(text: str) -> None:
    t = Tombstones().with_lines([FACT])
    assert t.spans(text), text


@pytest.mark.parametrize(
    "text",
    [
        "Alice's favourite shop sells tea",  # the same words, not the same text
        "The tea shop is Kettle",  # shorter than a shingle and not a whole forgotten line
        "Harbour Street is busy on Fridays",
    ],
)
def test_text_that_only_shares_words_is_left_alone(text: str) -> None:
    t = Tombstones().with_lines([FACT])
    assert t.spans(text) == []
    assert scrub_messages([Message("user", text, 1)], t)[0].text == text


def test_a_short_line_is_caught_whole_but_never_a_generic_one() -> None:
    t = Tombstones().with_lines(["wifi: hunter2 guest", "# People"])
    assert t.spans("the wifi hunter2 guest works") != []
    assert t.spans("people") == []  # two words or fewer: too generic to tombstone


def test_a_message_left_with_no_words_is_dropped() -> None:
    t = Tombstones().with_lines([FACT])
    assert scrub_messages([Message("user", FACT, 1)], t) == []


def test_the_tombstone_file_holds_keyed_hashes_never_the_text() -> None:
    t = Tombstones().with_lines([FACT])
    raw = t.to_json()
    for word in ("alice", "kettle", "crumb", "harbour"):
        assert word.encode() not in raw.lower()
    again = Tombstones.from_json(raw)
    assert again is not None and again.spans(CHAT) == t.spans(CHAT)
    # another key, other hashes: a guessed phrase cannot be checked against a table
    assert Tombstones().with_lines([FACT]).hashes.isdisjoint(t.hashes)
    assert Tombstones.from_json(b"not json") is None


@pytest.mark.parametrize(
    "raw",
    [
        None,
        b"",
        b"[]",
        b'"key"',
        b'{"version": 1, "hashes": []}',
        b'{"version": 1, "key": "not hex", "hashes": []}',
        b'{"version": 1, "key": 7, "hashes": []}',
        b'{"version": 1, "key": "ab", "hashes": "6:ab"}',
        b'{"version": 2, "key": "ab", "hashes": []}',
    ],
)
def test_an_unreadable_tombstone_file_reads_as_none(raw: bytes | None) -> None:
    assert Tombstones.from_json(raw) is None


# --------------------------------------------------------------------------- service, built-in


def config(ws: Path, *, access: str = "rw", sessions: bool = True) -> Any:
    search: dict[str, Any] = {"provider": "none"}
    if sessions:
        search |= {"sources": ["memory", "sessions"], "experimental": {"sessionMemory": True}}
    return validate_config(
        {
            "agents": {
                "defaults": {
                    "workspace": str(ws),
                    "workspaceAccess": access,
                    "memorySearch": search,
                }
            }
        }
    )


def msg(role: str, text: str) -> str:
    return json.dumps(
        {"type": "message", "role": role, "content": [{"type": "text", "text": text}]}
    )


@pytest.fixture
def ws(workspace: Path) -> Path:
    (workspace / "MEMORY.md").write_text(MEMORY)
    (workspace / "memory").mkdir(exist_ok=True)
    (workspace / "memory" / "2026-11-29.md").write_text(
        "# 2026-11-29\n\nRotated the webhook secret; the old one stops working on Monday.\n"
    )
    return workspace


def transcript(svc: MemoryService, text: str = CHAT) -> Path:
    agent = svc.agent()
    agent.state.sessions_dir.mkdir(parents=True, exist_ok=True)
    path = agent.state.sessions_dir / "s1.jsonl"
    path.write_text(msg("user", text) + "\n" + msg("assistant", "Got it, thanks.") + "\n")
    svc.index()  # a search never indexes transcripts itself
    return path


def hits(svc: MemoryService, query: str, corpus: str = "all") -> list[dict[str, Any]]:
    out = svc.search(query, corpus=corpus, min_score=0.0)  # type: ignore[arg-type]
    return [r.to_dict() for r in out.results]


def mentions(results: list[dict[str, Any]], word: str) -> list[str]:
    return [r["path"] for r in results if word.lower() in r["snippet"].lower()]


def test_forget_removes_the_fact_from_file_index_and_transcripts(ws: Path) -> None:
    with MemoryService(config(ws), workspace=ws, background=False) as svc:
        src = transcript(svc)
        before = src.read_bytes()
        found = hits(svc, "kettle crumb tea shop")
        assert set(mentions(found, "kettle")) == {"MEMORY.md", "sessions/s1.jsonl"}

        plan = svc.forget_plan("MEMORY.md#L3")
        assert plan["confirm"] is False
        [sel] = plan["selections"]
        assert sel["lines"] == [{"line": 3, "text": f"- {FACT}"}]
        out = svc.forget(plan["selections"])

        assert FACT not in (ws / "MEMORY.md").read_text()
        assert "Deploys go out on Fridays" in (ws / "MEMORY.md").read_text()
        assert mentions(hits(svc, "kettle crumb tea shop"), "kettle") == []
        assert mentions(hits(svc, "harbour street", corpus="sessions"), "harbour") == []
        # the rest of the transcript message is still searchable, the transcript untouched
        assert "sessions/s1.jsonl" in [r["path"] for r in hits(svc, "bring the cake office")]
        assert src.read_bytes() == before
        [removed] = out["removed"]
        assert removed["ranges"] == [[3, 3]] and out["transcriptsPurged"] == ["sessions/s1.jsonl"]
        assert Path(removed["backup"]).read_text().endswith(f"3\t- {FACT}\n")
        assert oct(Path(removed["backup"]).stat().st_mode & 0o777) == "0o600"


def test_a_transcript_written_after_the_forget_cannot_bring_it_back(ws: Path) -> None:
    with MemoryService(config(ws), workspace=ws, background=False) as svc:
        svc.forget(svc.forget_plan("MEMORY.md#L3")["selections"])
        transcript(svc, f"Remind me: {FACT}")
        assert mentions(hits(svc, "kettle crumb tea shop"), "kettle") == []


def test_lines_that_changed_since_they_were_shown_are_not_removed(ws: Path) -> None:
    with MemoryService(config(ws), workspace=ws, background=False) as svc:
        plan = svc.forget_plan("MEMORY.md#L3-L4")
        text = (ws / "MEMORY.md").read_text().replace("Fridays", "Thursdays")
        (ws / "MEMORY.md").write_text(text)
        with pytest.raises(MemoryWriteFailed, match="changed since"):
            svc.forget(plan["selections"])
        assert (ws / "MEMORY.md").read_text() == text
        assert load_tombstones(svc.agent()) is None
        assert not list((svc.agent().state.root / "forgotten-backups").glob("*"))


def test_an_append_racing_a_forget_is_never_lost(ws: Path) -> None:
    agent = config(ws, sessions=False)
    with MemoryService(agent, workspace=ws, background=False) as svc:
        a = svc.agent()
        target = ws / "MEMORY.md"
        target.write_text(
            "# Memory\n\n" + "".join(f"- forget me number {i} please\n" for i in range(40))
        )
        appended = [f"- kept line {i} from the appender" for i in range(60)]
        errors: list[BaseException] = []

        def appender() -> None:
            try:
                for line in appended:
                    append_memory(a, "long-term", line, now=datetime.now())
            except BaseException as err:  # reported below
                errors.append(err)

        thread = threading.Thread(target=appender)
        thread.start()
        roots = list(a.memory_roots())

        def forget(line: str) -> None:
            # an append between the listing and the removal moves no line: the removal goes
            # ahead; one that replaced the file makes it refuse, and it is asked again, as is a
            # read that the appender kept changing
            for _ in range(5):
                n = target.read_text().split("\n").index(line) + 1
                try:
                    sel = select_lines(a, roots, "MEMORY.md", [n])
                    forget_lines(a, sel, sel.sha256, now=datetime.now())
                    return
                except MemoryWriteFailed:
                    continue
                except PathNotAllowed as err:
                    if "kept changing while being read" not in str(err):
                        raise
                    continue
            raise AssertionError(f"{line!r} could not be forgotten")

        for i in range(40):
            forget(f"- forget me number {i} please")
        thread.join()
        assert errors == []
        final = target.read_text()
        assert all(line in final for line in appended)
        assert "forget me" not in final


@pytest.mark.parametrize(
    "target",
    ["../outside.md#L1", "notes.txt#L1", "/etc/passwd", "memory/../../x.md#L1", ".git/x.md#L1"],
)
def test_a_path_memory_get_would_not_serve_is_refused(ws: Path, target: str) -> None:
    (ws.parent / "outside.md").write_text("secret\n")
    named = target if target.endswith(("#L1", ".md")) else target + ".md#L1"
    with (
        MemoryService(config(ws), workspace=ws, background=False) as svc,
        pytest.raises(PathNotAllowed),
    ):
        svc.forget_plan(named)


def test_read_only_agents_may_neither_forget_nor_reset(ws: Path) -> None:
    with MemoryService(config(ws, access="ro"), workspace=ws, background=False) as svc:
        with pytest.raises(WorkspaceReadOnly):
            svc.forget_plan("MEMORY.md#L3")
        with pytest.raises(WorkspaceReadOnly):
            svc.forget([{"path": "MEMORY.md", "ranges": [[3, 3]], "sha256": "0" * 64}])
        with pytest.raises(WorkspaceReadOnly):
            svc.reset()
    assert FACT in (ws / "MEMORY.md").read_text()


def mark(db: Path) -> None:
    """A table no rebuild would make: gone after a reset only if the file itself was dropped."""
    with sqlite3.connect(db) as conn:
        conn.execute("create table reset_marker(x)")


def marked(db: Path) -> bool:
    with sqlite3.connect(db) as conn:
        q = "select count(*) from sqlite_master where name = 'reset_marker'"
        return bool(conn.execute(q).fetchone()[0])


QUERIES = ["webhook secret", "deploy fridays", "staging database region", "kettle tea shop"]


def answers(svc: MemoryService) -> list[list[tuple[str, int, int, float]]]:
    return [
        [(r["path"], r["startLine"], r["endLine"], round(r["score"], 4)) for r in hits(svc, q)]
        for q in QUERIES
    ]


def test_reset_rebuilds_to_the_same_answers_and_keeps_what_is_not_derived(ws: Path) -> None:
    with MemoryService(config(ws), workspace=ws, background=False) as svc:
        src = transcript(svc, "We talked about the staging database region today.")
        svc.forget(svc.forget_plan("MEMORY.md#L3")["selections"])
        before = answers(svc)
        assert any(before)
        agent = svc.agent()
        db = agent.index_path
        mark(db)
        tombstones = load_tombstones(agent)
        markdown = {p: p.read_bytes() for p in ws.rglob("*.md")}
        out = svc.reset()
        assert str(db) in out["removed"]
        assert not marked(db)  # a new file, not the old one emptied
        assert answers(svc) == before
        assert load_tombstones(agent) == tombstones
        assert {p: p.read_bytes() for p in ws.rglob("*.md")} == markdown
        assert src.is_file()
        assert list((agent.state.root / "forgotten-backups").glob("*.txt"))


# --------------------------------------------------------------------------- the CLI


def cli(ws: Path, *argv: str, **kw: Any) -> Any:
    cfg = ws.parent / "memoryd.toml"
    if not cfg.exists():
        cfg.write_text(
            f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
        )
    env = {**os.environ, "MEMORYD_NO_SERVER": "1", **kw.pop("env", {})}
    return run_memoryd([argv[0], "--config", str(cfg), *argv[1:]], env=env, **kw)


def test_cli_forget_by_query_lists_and_needs_a_confirmation(ws: Path) -> None:
    dry = cli(ws, "forget", "kettle crumb tea shop", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["dryRun"] and plan["selections"][0]["lines"] == [{"line": 3, "text": f"- {FACT}"}]

    refused = cli(ws, "forget", "kettle crumb tea shop")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "--yes" in refused.stderr
    assert f"3  - {FACT}" in refused.stdout  # what would have gone was listed
    assert FACT in (ws / "MEMORY.md").read_text()

    done = cli(ws, "forget", "kettle crumb tea shop", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["removed"][0]["ranges"] == [[3, 3]]
    assert FACT not in (ws / "MEMORY.md").read_text()
    after = cli(ws, "search", "kettle crumb tea shop", "--json", "--min-score", "0")
    assert "kettle" not in after.stdout


def test_cli_errors_are_one_line_and_non_zero(ws: Path) -> None:
    for argv, code in [
        (("forget", "../x.md#L1"), 2),
        (("forget", "MEMORY.md#L99"), 2),
        (("forget", "MEMORY.md#L4-L2"), 2),
        (("forget", "zeppelin hangar octopus", "--yes"), 1),
        (("reset",), 2),
    ]:
        got = cli(ws, *argv)
        assert got.returncode == code, (argv, got.stderr)
        assert got.stderr.startswith("memoryd: error: ") and got.stderr.count("\n") == 1, got.stderr
        assert "Traceback" not in got.stderr
    ro = ws.parent / "ro.toml"
    ro.write_text(f'[agents.defaults]\nworkspace = "{ws}"\nworkspaceAccess = "ro"\n')
    for argv in (("forget", "MEMORY.md#L3"), ("reset", "--yes")):
        got = run_memoryd([argv[0], "--config", str(ro), "--json", *argv[1:]])
        assert got.returncode == 1
        assert json.loads(got.stdout)["code"] == "workspace_read_only"
    assert FACT in (ws / "MEMORY.md").read_text()


def test_cli_reset_needs_yes_and_rebuilds(ws: Path) -> None:
    before = cli(ws, "search", "webhook secret", "--json")
    out = cli(ws, "reset", "--yes", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["builtin"]["files"] == 2
    after = cli(ws, "search", "webhook secret", "--json")
    assert json.loads(after.stdout)["results"] == json.loads(before.stdout)["results"]


def test_forget_and_reset_go_through_a_running_serve_which_then_serves_no_stale_index(
    ws: Path, tmp_path: Path
) -> None:
    import signal
    import time

    from cli_support import spawn_memoryd
    from memoryd.paths import socket_path
    from memoryd.server import ping

    cfg = ws.parent / "memoryd.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = spawn_memoryd(["serve", "--config", str(cfg)], stderr=err)
    try:
        deadline = time.monotonic() + 30
        while ping(socket_path()) is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.1)

        def run(*argv: str) -> Any:
            got = run_memoryd([argv[0], "--config", str(cfg), "--json", *argv[1:]])
            assert got.returncode == 0, got.stderr
            return got

        assert "kettle" in run("search", "kettle crumb tea shop").stdout.lower()
        before = json.loads(run("search", "webhook secret").stdout)["results"]
        forgot = run("forget", "MEMORY.md#L3")
        assert "done by memoryd serve" in forgot.stderr
        assert json.loads(forgot.stdout)["removed"][0]["ranges"] == [[3, 3]]
        # serve answers at once from its purged index, with no wait for a watcher
        assert "kettle" not in run("search", "kettle crumb tea shop").stdout.lower()
        reset = run("reset", "--yes")
        assert "done by memoryd serve" in reset.stderr
        assert json.loads(run("search", "webhook secret").stdout)["results"] == before
        assert "kettle" not in run("search", "kettle crumb tea shop").stdout.lower()
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    assert "Traceback" not in log.read_text()


def test_a_memory_file_that_is_a_symlink_is_neither_read_nor_rewritten(ws: Path) -> None:
    outside = ws.parent / "elsewhere.md"
    outside.write_text(MEMORY)
    (ws / "MEMORY.md").unlink()
    (ws / "MEMORY.md").symlink_to(outside)
    with MemoryService(config(ws), workspace=ws, background=False) as svc:
        with pytest.raises(PathNotAllowed, match="symlink"):
            svc.forget_plan("MEMORY.md#L3")
        a = svc.agent()
        sel = select_lines(a, list(a.memory_roots()), "memory/2026-11-29.md", [3])
        (ws / "memory" / "2026-11-29.md").unlink()
        (ws / "memory" / "2026-11-29.md").symlink_to(outside)
        with pytest.raises(PathNotAllowed):
            forget_lines(a, sel, sel.sha256, now=datetime.now())
    assert outside.read_text() == MEMORY


@pytest.mark.parametrize(("answer", "code"), [("y\n", 0), ("n\n", 1)])
def test_on_a_terminal_forget_asks_and_removes_only_on_yes(
    ws: Path, answer: str, code: int
) -> None:
    import pty
    import subprocess
    import sys

    cli(ws, "status")  # writes the config file
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memoryd",
                "forget",
                "--config",
                str(ws.parent / "memoryd.toml"),
                "kettle crumb tea shop",
            ],
            stdin=secondary,
            stdout=subprocess.PIPE,
            stderr=secondary,
            env={**os.environ, "MEMORYD_NO_SERVER": "1"},
            text=True,
        )
        os.close(secondary)
        seen = b""
        while b"[y/N]" not in seen:
            seen += os.read(primary, 1024)
        os.write(primary, answer.encode())
        out, _ = proc.communicate(timeout=60)
    finally:
        os.close(primary)
    assert proc.returncode == code, out
    assert f"3  - {FACT}" in out
    assert (FACT in (ws / "MEMORY.md").read_text()) is (code != 0)


def test_appends_from_other_processes_during_a_forget_are_all_kept(ws: Path) -> None:
    cli(ws, "index")
    lines = [f"- appended by process {i} while forgetting" for i in range(8)]
    results: dict[str, Any] = {}

    def append(line: str) -> None:
        results[line] = cli(ws, "append", "--target", "long-term", line)

    def forget() -> None:
        results["forget"] = cli(ws, "forget", "MEMORY.md#L3-L4")

    threads = [threading.Thread(target=append, args=(line,)) for line in lines]
    threads.insert(4, threading.Thread(target=forget))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = (ws / "MEMORY.md").read_text()
    for line in lines:
        assert results[line].returncode == 0, results[line].stderr
        assert line in text
    gone = results["forget"]
    if gone.returncode == 0:
        assert FACT not in text and "Deploys go out on Fridays" not in text
    else:  # refused cleanly: the lines were moved by an append before they were removed
        assert gone.stderr.count("\n") == 1 and FACT in text
    assert "The staging database lives in eu-west-3." in text


def test_reset_drops_a_leftover_qmd_home_but_keeps_downloaded_models(ws: Path) -> None:
    with MemoryService(config(ws), workspace=ws, background=False) as svc:
        home = svc.agent().state.qmd_home
        models = home / "xdg-cache" / "qmd" / "models"
        models.mkdir(parents=True)
        (models / "embed.gguf").write_bytes(b"GGUF")
        (home / "xdg-cache" / "qmd" / "index.sqlite").write_bytes(b"x")
        (home / "xdg-config").mkdir()
        out = svc.reset()
        assert str(home / "xdg-cache" / "qmd" / "index.sqlite") in out["removed"]
        assert str(home / "xdg-config") in out["removed"]
        assert (models / "embed.gguf").read_bytes() == b"GGUF"
        assert sorted(p.name for p in home.rglob("*")) == [
            "embed.gguf",
            "models",
            "qmd",
            "xdg-cache",
        ]


def test_reset_and_purge_on_a_postgresql_store(pg_url: str, ws: Path) -> None:
    from helpers import agent_for, index_for
    from memoryd.builtin_index import MemoryIndex

    agent = agent_for(ws, {"store": {"driver": "postgres", "url": pg_url}})
    idx = index_for(agent)
    assert isinstance(idx, MemoryIndex)
    idx.sync()
    before = [r.path for r in idx.search("webhook secret").results]
    assert before and idx.status().files == 2
    (ws / "MEMORY.md").write_text("# Memory\n")
    idx.purge(["MEMORY.md"])
    assert idx.search("kettle crumb", mode="keyword").results == []
    assert idx.reset() and idx.status().files == 0
    idx.sync()
    assert [r.path for r in idx.search("webhook secret").results] == before
    idx.close()
