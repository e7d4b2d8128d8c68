"""Real faults of the real qmd: a real SQLite lock on its index, and coloured error output.

The lock is taken by another process with Python's sqlite3 on the agent's qmd `index.sqlite`
(another process, because SQLite's POSIX locks belong to a process and memoryd opens that file
itself to see whether it holds vectors). qmd's index is in WAL mode, so `BEGIN EXCLUSIVE` alone blocks only
writers (`qmd update`); with `PRAGMA locking_mode = EXCLUSIVE` it blocks readers (`qmd search`)
too. Colour comes from a wrapper in front of the real qmd: qmd itself colours only on a TTY, and
memoryd always reads it through pipes.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import pytest

from helpers import background, within
from memoryd.errors import QmdExitError, QmdLocked
from memoryd.orchestrator import MemoryService
from memoryd.qmd_adapter import QmdManager
from memoryd.qmd_adapter._manager import busy_timeout_ms
from memoryd.qmd_adapter._runner import run_qmd
from qmd_support import (
    MISSING_MODEL,
    QmdRig,
    require_qmd,
    start_service,
    top_path,
    wait_for_backend,
    write,
)

SEARCH_TIMEOUT_MS = 4000
UPDATE_TIMEOUT_MS = 6000

LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
if sys.argv[2] == "readers":
    conn.execute("PRAGMA locking_mode = EXCLUSIVE")
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()  # held until the test closes our stdin
conn.execute("ROLLBACK")
"""

Blocks = Literal["writers", "readers"]


@contextmanager
def exclusive_lock(db: Path, blocks: Blocks) -> Iterator[None]:
    """`BEGIN EXCLUSIVE` on `db`, held by a child process until the block ends."""
    assert db.is_file(), db
    proc = subprocess.Popen(
        [sys.executable, "-c", LOCKER, str(db), blocks],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=10) == 0
        proc.stdout.close()


COLOURING_WRAPPER = """#!{python}
# the real qmd, with every stderr line wrapped in bold red (as a FORCE_COLOR build would)
import subprocess, sys
done = subprocess.run([{real!r}, *sys.argv[1:]], stderr=subprocess.PIPE)
for line in done.stderr.decode("utf-8", "replace").splitlines():
    sys.stderr.write("\\x1b[1;31m" + line + "\\x1b[0m\\n")
sys.exit(done.returncode)
"""


def colouring_wrapper(tmp_path: Path, qmd: str) -> str:
    path = tmp_path / "bin" / "qmd"
    write(path, COLOURING_WRAPPER.format(python=sys.executable, real=qmd))
    path.chmod(0o755)
    return str(path)


class Rig(QmdRig):
    """A `QmdRig` with the timeouts these tests measure against and a fast debounce."""

    def __init__(self, tmp_path: Path, command: str, **qmd_cfg: Any) -> None:
        update = {
            "onBoot": False,
            "interval": 0,
            "debounceMs": 50,
            "updateTimeoutMs": UPDATE_TIMEOUT_MS,
        }
        super().__init__(
            tmp_path,
            command,
            **{"limits": {"timeoutMs": SEARCH_TIMEOUT_MS}, "update": update, **qmd_cfg},
        )


def qmd_of(svc: MemoryService) -> QmdManager:
    mgr = svc.backend().qmd
    assert isinstance(mgr, QmdManager)
    return mgr


@pytest.mark.qmd
@pytest.mark.parametrize("coloured", [False, True], ids=["plain stderr", "coloured stderr"])
def test_a_lock_that_blocks_readers_fails_over_as_qmd_locked_and_qmd_serves_once_released(
    tmp_path: Path, coloured: bool
) -> None:
    qmd = require_qmd()
    rig = Rig(tmp_path, colouring_wrapper(tmp_path, qmd) if coloured else qmd)
    svc = rig.service()
    with background() as tg:
        start_service(svc, tg)
        healthy = svc.memory_search("zeppelin budget")
        assert healthy["backend"] == "qmd" and top_path(healthy) == "memory/2026-01-03.md"

        with exclusive_lock(qmd_of(svc).home.index_db, "readers"):
            t = time.monotonic()
            failed = svc.memory_search("zeppelin budget")
            took = time.monotonic() - t
            # qmd itself said "database is locked" (its busy timeout is bounded by ours):
            # not a QmdTimeout after the whole search budget
            reason = failed["fallback"]["reason"]
            assert failed["backend"] == "builtin", failed
            assert reason.startswith("QmdLocked: ") and "database is locked" in reason, reason
            assert "\x1b" not in reason
            assert top_path(failed) == "memory/2026-01-03.md"
            assert took < SEARCH_TIMEOUT_MS / 1000 * 1.5, f"failover took {took:.2f}s"
            st = svc.status()
            assert st["backend"] == "builtin" and st["fallback"]["reason"] == reason
            # the built-in index answers meanwhile, without paying for qmd again
            with within(1.5):
                again = svc.memory_search("green tea")
            assert again["backend"] == "builtin" and top_path(again) == "MEMORY.md"

        wait_for_backend(svc, "qmd")
        back = svc.memory_search("zeppelin budget")
        assert back["backend"] == "qmd" and back["fallback"] is None
        assert top_path(back) == "memory/2026-01-03.md"
        print(f"locked search failed over in {took:.2f}s (timeout {SEARCH_TIMEOUT_MS} ms)")
    svc.close()


@pytest.mark.qmd
def test_a_write_lock_fails_qmd_update_as_locked_while_qmd_search_still_answers(
    tmp_path: Path,
) -> None:
    rig = Rig(tmp_path, require_qmd())
    svc = rig.service()
    with background() as tg:
        start_service(svc, tg)
        mgr = qmd_of(svc)
        assert (svc.memory_search("zeppelin budget"))["backend"] == "qmd"
        with exclusive_lock(mgr.home.index_db, "writers"):
            # WAL: readers are not blocked, so qmd keeps serving searches
            during = svc.memory_search("zeppelin budget")
            assert during["backend"] == "qmd" and during["fallback"] is None
            write(rig.ws / "memory" / "2026-01-04.md", "# 2026-01-04\n\nThe walrus left.\n")
            t = time.monotonic()
            with pytest.raises(QmdLocked) as caught:
                mgr.update()
            took = time.monotonic() - t
            assert caught.value.code == "qmd_locked"
            assert "database is locked" in str(caught.value)
            assert took < UPDATE_TIMEOUT_MS / 1000, f"update gave up after {took:.2f}s"
            # the maintenance loop's own update (what a watched change triggers) records it
            svc.backend().notify_changed()
            with within(UPDATE_TIMEOUT_MS / 1000 * 2):
                while not (mgr.status().last_error or "").startswith("update failed"):
                    time.sleep(0.1)
            st = svc.status()
            assert "its index is locked" in st["qmd"]["lastError"], st["qmd"]
            assert (svc.memory_search("walrus"))["results"] == []  # not indexed yet

        mgr.update()
        found = svc.memory_search("walrus")
        assert found["backend"] == "qmd" and top_path(found) == "memory/2026-01-04.md"
        print(f"locked update raised QmdLocked after {took:.2f}s (timeout {UPDATE_TIMEOUT_MS} ms)")
    svc.close()


@pytest.mark.qmd
@pytest.mark.parametrize("coloured", [False, True], ids=["real qmd", "coloured stderr"])
def test_a_qmd_error_with_escapes_reaches_last_error_as_plain_text(
    tmp_path: Path, coloured: bool
) -> None:
    # even through a pipe, the real qmd starts embed's stderr with a cursor-hiding escape
    qmd = require_qmd()
    command = colouring_wrapper(tmp_path, qmd) if coloured else qmd
    # the embed model is a file that does not exist: qmd fails in seconds with its own message
    rig = Rig(tmp_path, command, searchMode="query", models={"embed": MISSING_MODEL})
    svc = rig.service()
    with background() as tg:
        start_service(svc, tg)
        mgr = qmd_of(svc)
        with pytest.raises(QmdExitError) as caught:
            mgr.embed()
        assert "\x1b" in caught.value.stderr, caught.value.stderr
        st = svc.status()
        last = st["qmd"]["lastError"]
        assert last == (
            f'embed failed: qmd embed exited with code 1: No model file found at "{MISSING_MODEL}"'
        ), repr(last)
    svc.close()


@pytest.mark.parametrize(
    ("left_s", "configured", "expected_ms"),
    [
        (4.0, None, 1333),  # a search: qmd gives up on the lock well inside our 4 s
        (120.0, None, 40_000),  # an update
        (0.01, None, 50),  # never zero: zero would make qmd fail on any contention at all
        (4.0, "500", 500),  # the user's own smaller setting wins
        (4.0, "600000", 1333),  # a larger one would outlast our timeout
        (4.0, "soon", 1333),  # not a number of milliseconds
    ],
)
def test_qmd_is_told_to_give_up_on_a_lock_well_before_our_timeout(
    left_s: float, configured: str | None, expected_ms: int
) -> None:
    assert busy_timeout_ms(left_s, configured) == expected_ms


@pytest.mark.parametrize(
    ("stderr", "message"),
    [
        (  # qmd's own message above its generic hint, after a cursor-hiding escape
            "\x1b[?25lQMD Warning: no GPU acceleration, running on CPU (slow).\n"
            'No model file found at "/m.gguf"\n'
            "If qmd still behaves unexpectedly, run 'qmd doctor' for diagnostics.\n",
            'No model file found at "/m.gguf"',
        ),
        (  # node's uncaught error above its stack and version
            "/q/wrappers.js:9\n\tthis[cppdb].exec(sql);\n\t            ^\n\n"
            "SqliteError: database is locked\n    at Database.exec (/q/wrappers.js:9:14)\n"
            "  code: 'SQLITE_BUSY'\n}\n\nNode.js v22.23.5\n",
            "SqliteError: database is locked",
        ),
        (
            "\x1b[1;31mCollection not found: nope\x1b[0m\n",
            "Collection not found: nope",
        ),
        (
            "Unknown command: frobnicate\nRun 'qmd --help' for usage.\n",
            "Unknown command: frobnicate",
        ),
        ("\x1b]0;qmd\x07Segmentation fault\r\n", "Segmentation fault"),
    ],
)
def test_a_failed_qmd_call_is_named_by_its_meaningful_stderr_line_in_plain_text(
    tmp_path: Path, stderr: str, message: str
) -> None:
    fake = tmp_path / "qmd"
    write(fake, f"#!{sys.executable}\nimport sys\nsys.stderr.write({stderr!r})\nsys.exit(1)\n")
    fake.chmod(0o755)
    with pytest.raises(QmdExitError) as caught:
        run_qmd(str(fake), ["embed"], env={"PATH": "/usr/bin:/bin"}, cwd="/", timeout_s=30)
    assert str(caught.value) == f"qmd embed exited with code 1: {message}"
