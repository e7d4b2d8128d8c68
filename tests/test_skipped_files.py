"""Memory files the index cannot take are named, once, with their reason, and do not keep the
index "dirty": an unreadable file (with the OS reason), a binary one, one over
`sync.maxFileBytes`; and discovery does not follow a mount point below a memory root.

The unreadable case needs a process that permissions stop: as root (CI runs as root) the CLI
runs with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped from its bounding set (`setpriv`),
so a `chmod 000` note is as unreadable to it as to any user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cli_support import run_memoryd

IS_ROOT = os.geteuid() == 0


def unavailable(reason: str) -> None:
    """Skip here; fail under CI, which must run every case for real."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test: {reason}", pytrace=False)
    pytest.skip(reason)


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
    (ws / "MEMORY.md").write_text("# Memory\n\nThe zebra migration starts in May.\n")
    return ws


def cli(
    ws: Path, env: dict[str, str], *args: str, unprivileged: bool = False
) -> subprocess.CompletedProcess[str]:
    argv = [*args, "--workspace", str(ws)]
    if not unprivileged or not IS_ROOT:
        return run_memoryd(argv, env=env)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        unavailable("setpriv (util-linux) is needed to drop root's file capabilities")
    drop = [setpriv, "--bounding-set=-dac_override,-dac_read_search", "--inh-caps=-all"]
    return subprocess.run(
        [*drop, sys.executable, "-m", "memoryd", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def status(ws: Path, env: dict[str, str], **kw: bool) -> dict:
    out = cli(ws, env, "status", "--json", **kw)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_unreadable_note_is_named_with_the_os_reason_and_leaves_the_index_clean(
    ws: Path, env: dict[str, str]
) -> None:
    locked = ws / "memory" / "locked.md"
    locked.write_text("# Locked\n\nthe zebra secret\n")
    locked.chmod(0)
    try:
        first = cli(ws, env, "index", unprivileged=True)
        assert first.returncode == 0, first.stderr
        assert "indexed 1 files" in first.stdout
        assert first.stdout.count("memory/locked.md") == 1, first.stdout
        assert "not indexed: memory/locked.md (cannot be read: Permission denied)" in first.stdout
        for _ in range(2):  # however often it is re-indexed or asked
            st = status(ws, env, unprivileged=True)
            assert st["dirty"] is False, st["issues"]
            assert st["builtin"]["skipped"] == {"read_failed": 1}
            (entry,) = st["builtin"]["skippedFiles"]
            assert entry["path"] == "memory/locked.md" and entry["reason"] == "read_failed"
            assert entry["detail"] == "Permission denied"
            assert not any("changed since the last sync" in i for i in st["issues"])
            assert "1 memory file(s) not indexed: memory/locked.md (read_failed)" in st["issues"]
            assert cli(ws, env, "index", unprivileged=True).returncode == 0
        human = cli(ws, env, "status", unprivileged=True)
        assert "memory/locked.md (cannot be read: Permission denied)" in human.stdout
    finally:
        locked.chmod(0o644)
    # readable again: a change, indexed by the next sync
    assert status(ws, env)["dirty"] is True
    assert cli(ws, env, "index").returncode == 0
    st = status(ws, env)
    assert (st["dirty"], st["builtin"]["files"], st["builtin"]["skippedFiles"]) == (False, 2, [])


@pytest.mark.parametrize("kind", ["nul", "unprintable"])
def test_a_binary_md_file_is_not_indexed_and_is_named(
    ws: Path, env: dict[str, str], kind: str
) -> None:
    data = bytearray(os.urandom(4096))
    data[100:120] = b" zebra migration "
    if kind == "nul":
        data[50] = 0
    else:  # no NUL, but mostly bytes that are not text
        data = data.replace(b"\0", b"\x01")
    (ws / "memory" / "blob.md").write_bytes(bytes(data))
    out = cli(ws, env, "index")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("memory/blob.md") == 1, out.stdout
    found = json.loads(cli(ws, env, "search", "--json", "zebra migration").stdout)
    assert [r["path"] for r in found["results"]] == ["MEMORY.md"]
    (entry,) = status(ws, env)["builtin"]["skippedFiles"]
    assert (entry["path"], entry["reason"]) == ("memory/blob.md", "binary")
    assert ("NUL" in entry["detail"]) == (kind == "nul")


def test_a_note_over_max_file_bytes_is_listed_with_its_size_and_still_read_by_get(
    ws: Path, env: dict[str, str]
) -> None:
    # one line over the default 4 MB: once ~2,400 chunks to embed, now none
    line = "zebra " * (4 * 1024 * 1024 // 6 + 10)
    big = ws / "memory" / "2026-11-20.md"
    big.write_text(f"# Big\n{line}\nthe last line\n")
    size = big.stat().st_size
    out = cli(ws, env, "index", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["chunks"] == 1  # MEMORY.md alone
    assert report["skipped"] == [
        {
            "path": "memory/2026-11-20.md",
            "reason": "too_large",
            "detail": f"{size:,} bytes, over sync.maxFileBytes ({4 * 1024 * 1024:,})",
            "size": size,
        }
    ]
    st = status(ws, env)
    assert st["dirty"] is False and st["builtin"]["skipped"] == {"too_large": 1}
    page = json.loads(cli(ws, env, "get", "--json", "memory/2026-11-20.md", "--from", "3").stdout)
    assert page["text"] == "the last line\n"


def test_max_file_bytes_is_configurable_and_a_file_that_shrinks_is_indexed(
    ws: Path, env: dict[str, str], tmp_path: Path
) -> None:
    cfg = Path(env["MEMORYD_CONFIG"])
    cfg.write_text(cfg.read_text() + "[agents.defaults.memorySearch.sync]\nmaxFileBytes = 100\n")
    note = ws / "memory" / "notes.md"
    note.write_text("# Notes\n\n" + "zebra stripes " * 20 + "\n")
    assert cli(ws, env, "index").returncode == 0
    assert [f["reason"] for f in status(ws, env)["builtin"]["skippedFiles"]] == ["too_large"]
    note.write_text("# Notes\n\nzebra stripes\n")
    assert status(ws, env)["dirty"] is True
    assert cli(ws, env, "index").returncode == 0
    st = status(ws, env)
    assert (st["builtin"]["files"], st["builtin"]["skippedFiles"]) == (2, [])


def test_a_bind_mount_below_a_memory_root_is_skipped_and_counted(
    ws: Path, env: dict[str, str], tmp_path: Path
) -> None:
    unshare = shutil.which("unshare")
    if not IS_ROOT or unshare is None:
        unavailable("a bind mount needs root and util-linux unshare")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "leak.md").write_text("# Outside\n\nthe zebra passport number\n")
    (ws / "memory" / "mnt").mkdir()
    (ws / "memory" / "note.md").write_text("# Note\n\na zebra crossing\n")
    # a private mount namespace: the bind mount (same file system, same st_dev) goes with it
    script = (
        f'mount --bind "$1" "$2" && "{sys.executable}" -m memoryd index --json --workspace "$3"'
        f' && "{sys.executable}" -m memoryd status --json --workspace "$3"'
    )
    paths = [str(outside), str(ws / "memory" / "mnt"), str(ws)]
    proc = subprocess.run(
        [unshare, "--mount", "--propagation", "private", "sh", "-c", script, "sh", *paths],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0 and "mount" in proc.stderr and not proc.stdout:
        unavailable(f"cannot bind-mount here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    decoder = json.JSONDecoder()
    report, end = decoder.raw_decode(proc.stdout)
    st, _ = decoder.raw_decode(proc.stdout[end:].lstrip())
    assert report["files"] == 2  # MEMORY.md and memory/note.md, not the mounted folder's note
    assert st["builtin"]["skipped"] == {"mount_point": 1}
    assert st["dirty"] is False
