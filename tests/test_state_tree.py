"""The state tree trusts no one: a loose root, a planted link, a folder of another owner.

Every case runs real `memoryd` commands on a real state folder, then checks that the command
refused in one line (`state_error`, naming the path and the fix) and that nothing outside the
state changed: no chmod, no file written through a link. The attack of another local user runs
as `nobody` (CI runs as root).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from cli_support import run_memoryd
from memoryd import paths
from memoryd.errors import StateError
from memoryd.fsio import (
    check_state_path,
    private_dir,
    private_file,
    read_private,
    write_private_atomic,
)
from second_user import as_nobody, needs_root


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def make_workspace(base: Path) -> Path:
    ws = base / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\n")
    return ws


def memoryd(ws: Path, state: Path, *argv: str) -> tuple[int, str, dict[str, object]]:
    """(exit status, stderr, the JSON answer) of `memoryd <argv> --json` on `ws` with `state`."""
    out = run_memoryd(
        [*argv, "--workspace", str(ws), "--json"],
        env={**os.environ, "MEMORYD_STATE_DIR": str(state)},
    )
    return out.returncode, out.stderr, json.loads(out.stdout or "{}")


def assert_refused(result: tuple[int, str, dict[str, object]], *words: str) -> None:
    rc, err, answer = result
    assert rc == 1, (rc, err, answer)
    assert answer.get("code") in ("state_error", "flush_state_error"), answer
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memoryd: error: "), err
    for word in words:
        assert word in lines[0], (word, lines[0])
    assert "Traceback" not in err


def snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry below `folder` (links not followed): its mode and, for files, its bytes."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(dirpath) / name
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else None
            out[str(p.relative_to(folder))] = (mode(p), data)
    return out


# --------------------------------------------------------------------------- a loose root


@pytest.mark.parametrize("loose", [0o777, 0o770, 0o757, 0o1777])
def test_a_state_root_others_can_write_is_refused_and_left_alone(
    tmp_path: Path, loose: int
) -> None:
    ws = make_workspace(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, loose)
    for command in (["index"], ["status"], ["search", "deploy"], ["get", "MEMORY.md"]):
        assert_refused(memoryd(ws, state, *command), str(state), f"chmod 700 {state}")
    assert mode(state) == loose  # never changed: the fix is the owner's to make
    assert list(state.iterdir()) == []  # nothing written into it


def test_a_state_root_of_another_owner_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to give a folder to another user")
    ws = make_workspace(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    os.chown(state, __import__("pwd").getpwnam("nobody").pw_uid, -1)
    assert_refused(memoryd(ws, state, "index"), str(state), "belongs to uid")
    assert list(state.iterdir()) == []


def test_a_private_state_root_of_ours_is_used_and_tightened(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    os.chmod(state, 0o755)  # readable by others, writable only by us: safe, made private
    rc, err, _answer = memoryd(ws, state, "search", "deploy")
    assert rc == 0, err
    assert mode(state) == 0o700


# --------------------------------------------------------------------------- another user


@needs_root
def test_another_user_cannot_redirect_the_index_through_a_loose_root(
    shared_base: Path, tmp_path: Path
) -> None:
    """The trial: with `<state>` 0777, `nobody` renamed `agents/`, rebuilt the tree and linked
    `workspaces/<key>` to a folder of the owner's; the owner's next `memoryd index` chmodded
    that folder 0700 and wrote `index.sqlite` into it."""
    ws = make_workspace(tmp_path)
    state = shared_base / "state"
    assert memoryd(ws, state, "index")[0] == 0
    key = paths.workspace_key(ws)
    os.chmod(state, 0o777)  # the loose root (pre-created so, or opened up later)
    victim = shared_base / "owners-project"
    victim.mkdir()
    os.chmod(victim, 0o755)
    (victim / "notes.txt").write_text("the owner's own file\n")
    before = snapshot(victim)

    def attack() -> None:
        os.rename(state / "agents", state / "agents.old")
        (state / "agents" / "main" / "workspaces").mkdir(parents=True)
        os.symlink(victim, state / "agents" / "main" / "workspaces" / key)

    assert as_nobody(attack) == "ok"
    for command in (["index"], ["status"], ["search", "deploy"]):
        assert_refused(memoryd(ws, state, *command), str(state), "chmod 700")
    assert mode(victim) == 0o755
    assert snapshot(victim) == before  # no index.sqlite, no chmod
    assert (state / "agents.old" / "main" / "workspaces" / key / "index.sqlite").is_file()

    # closing the root is not enough: what `nobody` built in it is still refused
    os.chmod(state, 0o700)
    assert_refused(memoryd(ws, state, "index"), str(state / "agents"), "belongs to uid")
    planted = state / "agents" / "main" / "workspaces"
    for folder in (state / "agents", state / "agents" / "main", planted):
        os.chown(folder, os.geteuid(), -1)
    assert_refused(memoryd(ws, state, "index"), str(planted / key), "symlink")
    assert snapshot(victim) == before


@needs_root
def test_another_user_cannot_read_the_state_tree_memoryd_creates(
    shared_base: Path, tmp_path: Path
) -> None:
    ws = make_workspace(tmp_path)
    state = shared_base / "state"
    old = os.umask(0)
    try:
        assert memoryd(ws, state, "index")[0] == 0
    finally:
        os.umask(old)
    db = state / "agents" / "main" / "workspaces" / paths.workspace_key(ws) / "index.sqlite"
    assert as_nobody(lambda: os.listdir(state)) == "PermissionError:13"
    os.chmod(state, 0o711)  # even with the root opened for traversal, nothing below is readable
    try:
        assert as_nobody(lambda: open(db, "rb").close()).startswith("PermissionError")
    finally:
        os.chmod(state, 0o700)


# --------------------------------------------------------------------------- planted links


def _indexed(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A workspace indexed once into a private state tree: (workspace, state, agent folder)."""
    ws = make_workspace(tmp_path)
    state = tmp_path / "state"
    rc, err, _ = memoryd(ws, state, "index")
    assert rc == 0, err
    rc, err, _ = memoryd(
        ws, state, "flush-check", "--tokens", "190000", "--context-window", "200000"
    )
    assert rc == 0, err
    return ws, state, state / "agents" / "main" / "workspaces" / paths.workspace_key(ws)


def _link_folder(path: Path, target: Path) -> None:
    os.rename(path, path.with_name(path.name + ".moved"))
    os.symlink(target, path)


def _link_file(path: Path, target: Path) -> None:
    path.unlink(missing_ok=True)
    os.symlink(target, path)


# (what is replaced by a link, relative to the state root or the agent folder; folder or file;
# the command that must refuse)
PLANTS: list[tuple[str, str, Callable[[Path, Path], None], list[str]]] = [
    ("root", "agents", _link_folder, ["index"]),
    ("root", "agents/main", _link_folder, ["status"]),
    ("root", "agents/main/workspaces", _link_folder, ["search", "deploy"]),
    ("agent", ".", _link_folder, ["index"]),
    ("agent", "index.sqlite", _link_file, ["index"]),
    ("agent", "index.sqlite-wal", _link_file, ["search", "deploy"]),
    (
        "agent",
        "sessions.json",
        _link_file,
        ["flush-check", "--tokens", "190000", "--context-window", "200000"],
    ),
]


@pytest.mark.parametrize(
    ("base", "rel", "plant", "command"), PLANTS, ids=[f"{b}/{r}" for b, r, _, _ in PLANTS]
)
def test_a_link_planted_in_the_state_tree_is_refused(
    tmp_path: Path,
    base: str,
    rel: str,
    plant: Callable[[Path, Path], None],
    command: list[str],
) -> None:
    ws, state, agent = _indexed(tmp_path)
    where = (state if base == "root" else agent) / rel
    where = Path(os.path.normpath(where))
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / ("folder" if plant is _link_folder else "file.txt")
    if plant is _link_folder:
        target.mkdir()
        os.chmod(target, 0o755)
    else:
        target.write_text("not memoryd's\n")
        os.chmod(target, 0o644)
    before = snapshot(outside)
    plant(where, target)
    assert_refused(memoryd(ws, state, *command), "symlink", str(where))
    assert snapshot(outside) == before


# --------------------------------------------------------------------------- inner folders


@pytest.mark.parametrize("rel", ["agents", "agents/main/workspaces"])
def test_an_inner_state_folder_others_can_write_is_refused_not_changed(
    tmp_path: Path, rel: str
) -> None:
    ws, state, _agent = _indexed(tmp_path)
    folder = state / rel
    os.chmod(folder, 0o770)
    assert_refused(memoryd(ws, state, "search", "deploy"), str(folder), f"chmod 700 {folder}")
    assert mode(folder) == 0o770


def test_every_state_folder_is_0700_and_file_0600_under_umask_000(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        _ws, state, _agent = _indexed(tmp_path)
    finally:
        os.umask(old)
    entries = snapshot(state)
    assert entries
    for rel, (m, data) in entries.items():
        assert m == (0o600 if data is not None else 0o700), (rel, oct(m))


# --------------------------------------------------------------------------- fsio, directly


def test_state_files_are_reached_without_following_a_link(
    isolated_env: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    folder = private_dir(isolated_env / "agents" / "x")
    assert mode(isolated_env) == 0o700 and mode(folder) == 0o700
    os.symlink(outside, folder / "link.json")
    for call in (
        lambda: read_private(folder / "link.json"),
        lambda: private_file(folder / "link.json"),
        lambda: check_state_path(folder / "link.json"),
        lambda: write_private_atomic(folder / "link.json", b"mine\n"),
    ):
        with pytest.raises(StateError, match="is a symlink"):
            call()
    assert outside.read_text() == "outside\n"
    assert os.listdir(folder) == ["link.json"]  # no temp file left behind
    os.symlink(tmp_path, isolated_env / "agents" / "y")
    with pytest.raises(StateError, match="is a symlink"):
        write_private_atomic(isolated_env / "agents" / "y" / "z.json", b"x")
    with pytest.raises(StateError, match="is a symlink"):
        private_dir(isolated_env / "agents" / "y" / "deeper")
    assert not (tmp_path / "z.json").exists() and not (tmp_path / "deeper").exists()
    assert read_private(isolated_env / "agents" / "missing" / "a.json") is None
