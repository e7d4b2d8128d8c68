"""Hostile workspaces and inputs, through the real CLI and MCP processes: none hangs or crashes.

The robustness issue's cases that live in the workspace rather than on the socket: a FIFO named
`*.md`, folders nested past the depth bound, a 5 MB single-line note, a query at the length cap,
stdin closed while a search is in flight, and a read-only state folder under `append`. Each runs
in a child process with a timeout far below "forever" and above any configured budget; the
library-level guarantees (walk, read, chunking) have their own tests in test_fsio/test_chunking.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cli_support import run_memoryd
from embedding_servers import FakeOpenAI, serve
from memoryd.core.layout import MAX_DEPTH
from memoryd.tools import MAX_QUERY_CHARS

IS_ROOT = os.geteuid() == 0


def cli(
    *args: str, env: dict[str, str], timeout: float = 60, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return run_memoryd(args, env=env, cwd=cwd, timeout=timeout)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    cfg = tmp_path / "memoryd.toml"
    cfg.write_text('[agents.defaults.memorySearch]\nprovider = "none"\n')
    return {
        **os.environ,
        "MEMORYD_CONFIG": str(cfg),
        "MEMORYD_STATE_DIR": str(tmp_path / "state"),
        "MEMORYD_NO_SERVER": "1",
    }


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\n\nThe deploy target is fly.io.\n")
    return ws


def nest(root: Path, depth: int, note_at: tuple[int, ...]) -> None:
    """`depth` folders `d/d/…` under `root`, a note at each depth in `note_at` (chdir keeps every
    mkdir relative, so no path ever nears PATH_MAX)."""
    here = os.getcwd()
    try:
        os.chdir(root)
        for level in range(1, depth + 1):
            os.mkdir("d")
            os.chdir("d")
            if level in note_at:
                Path("deep.md").write_text(f"# Deep {level}\n\nthe nested pelican at {level}\n")
    finally:
        os.chdir(here)


def unnest(root: Path) -> None:
    """Remove what `nest` made, deepest first (shutil.rmtree recurses and would hit the limit)."""
    here = os.getcwd()
    try:
        os.chdir(root)
        depth = 0
        while os.path.isdir("d"):
            os.chdir("d")
            depth += 1
        for _ in range(depth):
            for name in os.listdir("."):
                os.unlink(name)
            os.chdir("..")
            os.rmdir("d")
    finally:
        os.chdir(here)


@pytest.mark.timeout(180)
def test_a_fifo_and_folders_1000_deep_neither_hang_nor_break_index_search_or_status(
    ws: Path, env: dict[str, str]
) -> None:
    os.mkfifo(ws / "memory" / "2026-11-30.md")  # opened for reading, a FIFO blocks forever
    os.mkfifo(ws / "memory" / "also-a-fifo.md")
    nest(ws / "memory", 1_100, note_at=(3, MAX_DEPTH + 5, 1_100))
    try:
        check_hostile_tree(ws, env)
    finally:
        unnest(ws / "memory")


def check_hostile_tree(ws: Path, env: dict[str, str]) -> None:
    indexed = cli("index", "--json", "--workspace", str(ws), env=env)
    assert indexed.returncode == 0, indexed.stderr
    assert "Traceback" not in indexed.stderr
    assert json.loads(indexed.stdout)["files"] == 2  # MEMORY.md and the note at depth 3
    found = cli("search", "--json", "--workspace", str(ws), "nested pelican", env=env)
    assert found.returncode == 0, found.stderr
    paths = [r["path"] for r in json.loads(found.stdout)["results"]]
    assert paths == ["memory/d/d/d/deep.md"]  # past the depth bound nothing is read
    status = cli("status", "--json", "--workspace", str(ws), env=env)
    assert status.returncode == 0, status.stderr
    skipped = json.loads(status.stdout)["builtin"]["skipped"]
    assert skipped["special_file"] == 2 and skipped["too_deep"] >= 1, skipped
    got = cli("get", "--json", "--workspace", str(ws), "memory/2026-11-30.md", env=env)
    assert got.returncode != 0 and "Traceback" not in got.stderr
    assert "not a regular file" in got.stderr or "special" in got.stderr, got.stderr


@pytest.mark.timeout(180)
def test_a_5_mb_single_line_note_and_a_query_at_the_cap_answer_without_blocking(
    ws: Path, env: dict[str, str]
) -> None:
    cfg = Path(env["MEMORYD_CONFIG"])  # the note is over the default sync.maxFileBytes
    cfg.write_text(
        cfg.read_text() + "[agents.defaults.memorySearch.sync]\nmaxFileBytes = 8000000\n"
    )
    words = ["alpha", "beta", "gamma", "delta", "webhook", "secret", "rotated", "kitten", "grafana"]
    line = " ".join(words[i % len(words)] for i in range(600_000))  # ~4.6 MB, one line
    (ws / "memory" / "2026-11-20.md").write_text(f"# Big\n{line}\n")
    # the first search syncs the big note itself (the issue: 21.6 s of blocking, quadratic)
    started = time.monotonic()
    first = cli("search", "--json", "--workspace", str(ws), "deploy target", env=env, timeout=120)
    first_s = time.monotonic() - started
    assert first.returncode == 0, first.stderr
    assert [r["path"] for r in json.loads(first.stdout)["results"]][:1] == ["MEMORY.md"]
    query = ("deploy target webhook kitten " * 100)[:MAX_QUERY_CHARS]
    capped = cli("search", "--json", "--workspace", str(ws), query, env=env, timeout=120)
    assert capped.returncode == 0, (capped.stderr, first_s)
    assert json.loads(capped.stdout)["results"]
    over = cli("search", "--json", "--workspace", str(ws), query + "x", env=env)
    assert over.returncode != 0 and "Traceback" not in over.stderr
    assert json.loads(over.stdout)["code"] == "invalid_input"
    assert f"{MAX_QUERY_CHARS:,}" in over.stdout or str(MAX_QUERY_CHARS) in over.stdout


def rpc(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


@pytest.mark.timeout(120)
def test_mcp_exits_on_stdin_eof_while_a_search_is_still_waiting(tmp_path: Path, ws: Path) -> None:
    # An embedding API that answers after 30 s and a search budget that would wait for it: the
    # search is in flight when the host closes stdin; the server must not wait for it to end.
    api = FakeOpenAI(key="sk-test")
    api.delay = lambda body: 30.0
    with serve(api) as root:
        cfg = tmp_path / "slow.toml"
        cfg.write_text(
            "[agents.defaults.memorySearch]\n"
            'provider = "openai"\nmodel = "text-embedding-3-small"\n'
            f'remote = {{ baseUrl = "{root}/v1", apiKey = "sk-test" }}\n'
            "[agents.defaults.memorySearch.sync]\nsearchWaitMs = 60000\n"
        )
        env = {**os.environ, "MEMORYD_STATE_DIR": str(tmp_path / "state")}
        with subprocess.Popen(
            [sys.executable, "-m", "memoryd", "mcp", "--config", str(cfg), "--workspace", str(ws)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        ) as proc:
            try:
                rc, exit_s = search_then_close_stdin(proc, api)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.stderr is not None
            err = proc.stderr.read()
    assert rc == 0, err
    # far below the 30 s the embedding takes and the 60 s the search would wait
    assert exit_s < 10, f"exited {exit_s:.1f}s after stdin EOF"
    assert b"Traceback" not in err


def search_then_close_stdin(proc: subprocess.Popen[bytes], api: FakeOpenAI) -> tuple[int, float]:
    rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
    assert proc.stdout is not None and b'"id":1' in proc.stdout.readline()
    rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = {"name": "memory_search", "arguments": {"query": "deploy target"}}
    rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
    deadline = time.monotonic() + 30
    while not api.requests and time.monotonic() < deadline:
        time.sleep(0.05)  # until the search has reached the (slow) embedding API
    assert api.requests, "the search never asked for an embedding"
    assert proc.stdin is not None
    closed = time.monotonic()
    proc.stdin.close()
    rc = proc.wait(timeout=60)
    return rc, time.monotonic() - closed


INIT = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "fault-test", "version": "1"},
}


def read_only_mount(folder: Path, argv: list[str]) -> list[str]:
    """`argv` run with `folder` bind-mounted read-only in a private mount namespace."""
    unshare = shutil.which("unshare")
    if not IS_ROOT or unshare is None:
        pytest.skip("a read-only bind mount needs root and util-linux unshare")
    script = (
        f'mount --bind "{folder}" "{folder}" && mount -o remount,bind,ro "{folder}" && exec "$@"'
    )
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def under_read_only(
    folder: Path, argv: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        read_only_mount(folder, argv), capture_output=True, text=True, timeout=60, env=env
    )


@pytest.mark.timeout(120)
def test_append_needs_only_the_workspace_writable_and_names_what_is_read_only(
    tmp_path: Path, ws: Path, env: dict[str, str]
) -> None:
    assert cli("index", "--workspace", str(ws), env=env).returncode == 0
    state = Path(env["MEMORYD_STATE_DIR"])
    base = [sys.executable, "-m", "memoryd", "append", "--json", "--workspace", str(ws)]
    # a read-only state folder: the note is the source of truth, and it is written
    done = under_read_only(state, [*base, "- pelicans nest on the roof"], env)
    if done.returncode != 0 and "mount" in done.stderr and not done.stdout:
        pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    note = ws / json.loads(done.stdout)["path"]
    assert note.read_text().endswith("- pelicans nest on the roof\n")
    # once the state is writable again the next search indexes it
    found = cli("search", "--json", "--workspace", str(ws), "pelicans roof", env=env)
    assert [r["path"] for r in json.loads(found.stdout)["results"]][:1] == [
        note.relative_to(ws).as_posix()
    ]
    # a read-only workspace: refused, naming the note and saying why, nothing torn
    before = note.read_bytes()
    refused = under_read_only(ws, [*base, "- this cannot be written"], env)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    answer = json.loads(refused.stdout)
    assert answer["code"] == "write_failed" and str(note) in answer["error"]
    assert "Read-only file system" in answer["error"]
    assert note.read_bytes() == before
