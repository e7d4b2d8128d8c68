"""Races: a separate process keeps swapping memory paths for symlinks to outside files while
memoryd reads, walks and appends as fast as it can. Nothing from outside may ever be served or
written, and only the documented `PathNotAllowed` may be raised.

Each scenario first proves that the swapper defeats check-then-open code (the pattern the
security issue found: check the path string, then open it again by name), so a pass here means
the descriptor walk closed the window, not that the swapper was idle. `MEMORYD_RACE_SECONDS`
(default 3) sets how long each scenario runs; the figures are printed (`pytest -s`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from memoryd.core.layout import MemoryRoot
from memoryd.errors import MemoryWriteFailed, PathNotAllowed
from memoryd.fsio import FileRead, append_file, read_file, walk
from race_support import Swapper, Tally, exchange_unsupported, hammer, race_seconds

NOTE = b"# note\n\nwhat the agent remembered\n"
INNER = b"# inner\n\na note in a sub-folder\n"
SECRET = b"OUTSIDE-SECRET: never served, never written\n"
CONTROL_SECONDS = 10.0

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Scene:
    ws: Path
    memory: Path
    outside: Path
    secret: Path  # outside/secret.md
    outside_note: Path  # outside/dir/note.md: what a swapped-in folder would expose

    @property
    def root(self) -> MemoryRoot:
        return MemoryRoot(str(self.memory), "**/*.md")

    def outside_inodes(self) -> set[int]:
        return {os.stat(self.secret).st_ino, os.stat(self.outside_note).st_ino}


@pytest.fixture
def scene(tmp_path: Path) -> Scene:
    reason = exchange_unsupported(tmp_path)
    if reason:
        pytest.skip(reason)
    ws = tmp_path / "workspace"
    memory = ws / "memory"
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    memory.mkdir(parents=True)
    secret = outside / "secret.md"
    secret.write_bytes(SECRET)
    (outside / "dir" / "note.md").write_bytes(SECRET)
    (outside / "dir" / "inner.md").write_bytes(SECRET)
    return Scene(ws, memory, outside, secret, outside / "dir" / "note.md")


def classify(got: FileRead | bytes | None, allowed: set[bytes]) -> str:
    if got is None:
        return "missing"
    data = got.data if isinstance(got, FileRead) else got
    if b"OUTSIDE-SECRET" in data:
        return "LEAK"
    return "served" if data in allowed else "wrong"


def report(name: str, tally: Tally, swapper: Swapper) -> None:
    print(
        f"\n[race] {name}: {tally.calls} calls in {race_seconds():g} s, "
        f"{dict(tally.outcomes)}, swapper rounds {swapper.rounds}, unexpected {len(tally.unexpected)}"
    )


def assert_safe(tally: Tally, swapper: Swapper, *, served: bool = True) -> None:
    assert tally.unexpected == []
    assert tally["LEAK"] == 0
    assert tally["wrong"] == 0
    assert swapper.rounds > 0
    # the swap was seen (some calls refused) and, where a real file exists, it was served
    assert tally["PathNotAllowed"] > 0
    if served:
        assert tally["served"] > 0


# --------------------------------------------------------------------------- check-then-open


def check_then_read(path: Path, below: Path) -> bytes:
    """The pattern the issue found: lstat every component, then open the path again by name."""
    current = below
    for part in path.relative_to(below).parts:
        current = current / part
        if os.path.islink(current):
            raise PathNotAllowed(f"{path} goes through a symlink")
    if not path.is_file():
        raise PathNotAllowed(f"{path} is not a regular file")
    return path.read_bytes()


def check_then_append(path: Path, payload: bytes) -> None:
    if os.path.islink(path) or not path.is_file():
        raise PathNotAllowed(f"{path} is a symlink")
    with open(path, "ab") as fh:
        fh.write(payload)


def assert_check_then_open_loses(call: Callable[[], str]) -> Tally:
    tally = hammer(CONTROL_SECONDS, call, (PathNotAllowed, OSError), until="LEAK")
    assert tally["LEAK"] == 1, f"the swapper never beat check-then-open code: {tally}"
    print(f"\n[race] check-then-open control: leaked after {tally.calls} calls")
    return tally


# --------------------------------------------------------------------------- file swap


def test_read_file_never_serves_an_outside_file_swapped_in_for_the_note(scene: Scene) -> None:
    note = scene.memory / "note.md"
    note.write_bytes(NOTE)
    decoy = scene.memory / "decoy.md"
    decoy.symlink_to(scene.secret)

    with Swapper("exchange", [(note, decoy)]):
        assert_check_then_open_loses(lambda: classify(check_then_read(note, scene.ws), {NOTE}))

    def call() -> str:
        return classify(read_file(scene.root, "note.md", anchor=scene.ws), {NOTE})

    with Swapper("exchange", [(note, decoy)]) as swapper:
        tally = hammer(race_seconds(), call, (PathNotAllowed,))
    report("file swap, read_file", tally, swapper)
    # a note renamed in a loop never holds still long enough to be trusted (its ctime keeps
    # moving, see fsio._settled): refused while the loop runs, served as soon as it stops
    assert_safe(tally, swapper, served=False)
    assert call() == "served"
    assert scene.secret.read_bytes() == SECRET


# --------------------------------------------------------------------------- folder swap


def test_read_file_never_serves_through_a_folder_swapped_for_a_symlink(scene: Scene) -> None:
    sub = scene.memory / "sub"
    sub.mkdir()
    (sub / "note.md").write_bytes(NOTE)
    decoy = scene.memory / "decoydir"
    decoy.symlink_to(scene.outside / "dir", target_is_directory=True)

    with Swapper("exchange", [(sub, decoy)]):
        assert_check_then_open_loses(
            lambda: classify(check_then_read(sub / "note.md", scene.ws), {NOTE})
        )

    def call() -> str:
        return classify(read_file(scene.root, "sub/note.md", anchor=scene.ws), {NOTE})

    with Swapper("exchange", [(sub, decoy)]) as swapper:
        tally = hammer(race_seconds(), call, (PathNotAllowed,))
    report("folder swap, read_file", tally, swapper)
    assert_safe(tally, swapper)


# --------------------------------------------------------------------------- append target swap


def test_append_file_never_writes_outside_while_memory_md_is_swapped(scene: Scene) -> None:
    long_term = scene.ws / "MEMORY.md"
    start = b"# Memory\n\n"
    long_term.write_bytes(start)
    decoy = scene.ws / "decoy.md"
    decoy.symlink_to(scene.secret)
    root = MemoryRoot(str(scene.ws), "MEMORY.md")

    def naive() -> str:
        check_then_append(long_term, b"naive\n")
        return "LEAK" if scene.secret.read_bytes() != SECRET else "served"

    with Swapper("exchange", [(long_term, decoy)]):
        assert_check_then_open_loses(naive)
    scene.secret.write_bytes(SECRET)
    long_term.write_bytes(start)

    landed: list[bytes] = []

    def call() -> str:
        record = b"record %07d\n" % len(landed)
        append_file(root, "MEMORY.md", record, anchor=scene.ws)
        landed.append(record)
        return "served"

    with Swapper("exchange", [(long_term, decoy)]) as swapper:
        tally = hammer(race_seconds(), call, (PathNotAllowed,))
    report("MEMORY.md swap, append_file", tally, swapper)
    assert_safe(tally, swapper, served=False)  # refused while renamed in a loop, as for reads
    assert call() == "served"
    # every successful append is in the memory file, in order; a refused one left nothing
    assert scene.secret.read_bytes() == SECRET
    assert not long_term.is_symlink()
    assert long_term.read_bytes() == start + b"".join(landed)


# --------------------------------------------------------------------------- index (walk + read)


def test_walk_and_read_never_index_an_outside_file_while_notes_and_folders_swap(
    scene: Scene,
) -> None:
    note = scene.memory / "note.md"
    note.write_bytes(NOTE)
    sub = scene.memory / "sub"
    sub.mkdir()
    (sub / "inner.md").write_bytes(INNER)
    decoy = scene.memory / "decoy.md"
    decoy.symlink_to(scene.secret)
    decoydir = scene.memory / "decoydir"
    decoydir.symlink_to(scene.outside / "dir", target_is_directory=True)
    outside = scene.outside_inodes()
    pairs = [(note, decoy), (sub, decoydir)]

    def naive() -> str:
        worst = "served"
        for dirpath, _dirs, files in os.walk(scene.memory):
            for name in files:
                path = Path(dirpath) / name
                try:
                    got = classify(check_then_read(path, scene.ws), {NOTE, INNER})
                except (PathNotAllowed, OSError):
                    continue
                worst = "LEAK" if got == "LEAK" else worst
        return worst

    with Swapper("exchange", pairs):
        assert_check_then_open_loses(naive)

    reads: dict[str, int] = {}

    def call() -> str:
        worst = "served"
        for found in walk(scene.root, anchor=scene.ws).files:
            if found.ino in outside:
                return "LEAK"
            try:
                got = classify(read_file(scene.root, found.rel, anchor=scene.ws), {NOTE, INNER})
            except PathNotAllowed:
                got = "PathNotAllowed"
            reads[got] = reads.get(got, 0) + 1
            if got in ("LEAK", "wrong"):
                return got
        return worst

    with Swapper("exchange", pairs) as swapper:
        tally = hammer(race_seconds(), call, (PathNotAllowed,))
    report("note + folder swap, walk then read_file", tally, swapper)
    print(f"[race]   reads of walked files: {reads}")
    assert tally.unexpected == []
    assert tally["LEAK"] == 0
    assert tally["wrong"] == 0
    assert swapper.rounds > 0
    assert reads.get("served", 0) > 0
    # walk lists a note only while it is a real file; some reads still meet the swap
    assert reads.get("PathNotAllowed", 0) + reads.get("missing", 0) > 0


# --------------------------------------------------------------------------- hard-link flicker


def test_read_file_never_serves_an_outside_file_hard_linked_in_and_out(scene: Scene) -> None:
    flicker = scene.memory / "flicker.md"

    with Swapper("relink", [(scene.secret, flicker)]):
        assert_check_then_open_loses(lambda: classify(check_then_read(flicker, scene.ws), set()))

    def call() -> str:
        return classify(read_file(scene.root, "flicker.md", anchor=scene.ws), set())

    with Swapper("relink", [(scene.secret, flicker)]) as swapper:
        tally = hammer(race_seconds(), call, (PathNotAllowed,))
    report("hard link in and out, read_file", tally, swapper)
    assert_safe(tally, swapper, served=False)
    assert tally["missing"] > 0


def test_append_file_never_writes_into_an_outside_file_hard_linked_in_and_out(
    scene: Scene,
) -> None:
    """The write side of the same window: an append that met the dying name would land outside."""
    flicker = scene.memory / "flicker.md"

    def call() -> str:
        append_file(scene.root, "flicker.md", b"record\n", anchor=scene.ws)
        return "LEAK" if scene.secret.read_bytes() != SECRET else "served"

    with Swapper("relink", [(scene.secret, flicker)]) as swapper:
        tally = hammer(race_seconds(), call, (PathNotAllowed, MemoryWriteFailed))
    report("hard link in and out, append_file", tally, swapper)
    assert tally.unexpected == []
    assert tally["LEAK"] == 0 and scene.secret.read_bytes() == SECRET
    assert swapper.rounds > 0 and tally["PathNotAllowed"] > 0
