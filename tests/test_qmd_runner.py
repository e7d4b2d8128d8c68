"""The process runner against the real qmd: timeouts kill the whole group, caps, typed errors."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from memoryd.errors import QmdError, QmdExitError, QmdOutputTooLarge, QmdTimeout, QmdUnavailable
from memoryd.qmd_adapter._runner import kill_group, run_qmd
from qmd_support import fault_wrapper, require_qmd

pytestmark = [pytest.mark.qmd]


@pytest.fixture(scope="module")
def qmd_bin() -> str:
    return require_qmd()


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = dict(os.environ)
    out.update(
        XDG_CONFIG_HOME=str(tmp_path / "cfg"),
        QMD_CONFIG_DIR=str(tmp_path / "cfg" / "qmd"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        NO_COLOR="1",
    )
    return out


def live_group_members(pgid: int) -> list[int]:
    """Pids still running (not zombies) in process group `pgid`."""
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        return [pgid]
    live = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        state, group = fields[0], int(fields[2])
        if group == pgid and state not in ("Z", "X"):
            live.append(int(entry.name))
    return live


def test_missing_binary_raises_unavailable(env: dict[str, str], tmp_path: Path) -> None:
    with pytest.raises(QmdUnavailable, match="not found"):
        run_qmd(str(tmp_path / "no-such-qmd"), ["--version"], env=env, cwd="/", timeout_s=5)
    with pytest.raises(QmdUnavailable):
        run_qmd("memoryd-no-such-qmd-on-path", ["--version"], env=env, cwd="/", timeout_s=5)


def test_version_runs_from_a_neutral_cwd(qmd_bin: str, env: dict[str, str], tmp_path: Path) -> None:
    out = run_qmd(qmd_bin, ["--version"], env=env, cwd=str(tmp_path), timeout_s=30)
    assert out.stdout.startswith("qmd ")


def test_nonzero_exit_carries_code_and_stderr(qmd_bin: str, env: dict[str, str]) -> None:
    with pytest.raises(QmdExitError) as info:
        run_qmd(qmd_bin, ["collection", "show", "nope"], env=env, cwd="/", timeout_s=30)
    assert info.value.returncode == 1
    assert "not found" in info.value.stderr.lower()


def test_output_over_the_cap_raises_too_large(qmd_bin: str, env: dict[str, str]) -> None:
    with pytest.raises(QmdOutputTooLarge):
        run_qmd(qmd_bin, ["--help"], env=env, cwd="/", timeout_s=30, max_output_chars=200)
    out = run_qmd(qmd_bin, ["--help"], env=env, cwd="/", timeout_s=30)
    assert "qmd" in out.stdout


def test_timeout_kills_the_whole_process_group(
    qmd_bin: str, env: dict[str, str], tmp_path: Path
) -> None:
    # The wrapper leaves a real qmd worker (MCP server fed by a sleeping pipe) and a sleep behind,
    # like the npm launcher does; none of them may survive the timeout.
    pidfile = tmp_path / "pids"
    wrapper = fault_wrapper(
        tmp_path / "qmd-hang",
        qmd_bin,
        f'echo $$ > "{pidfile}"\nsleep 300 | "$REAL" mcp > /dev/null 2>&1 &\nsleep 300\n',
    )
    started = time.monotonic()
    with pytest.raises(QmdTimeout, match="timed out"):
        run_qmd(wrapper, ["search", "x"], env=env, cwd="/", timeout_s=2.5)
    assert time.monotonic() - started < 10
    pgid = int(pidfile.read_text())
    for _ in range(50):
        if not live_group_members(pgid):
            break
        time.sleep(0.1)
    assert live_group_members(pgid) == []


def test_closing_kills_the_process_group(qmd_bin: str, env: dict[str, str], tmp_path: Path) -> None:
    """What `QmdManager.close` does to a call in flight: its whole group is killed, and the
    call ends with an error at once instead of waiting out its timeout."""
    pidfile = tmp_path / "pids"
    wrapper = fault_wrapper(
        tmp_path / "qmd-hang", qmd_bin, f'echo $$ > "{pidfile}"\nsleep 300 | "$REAL" mcp\n'
    )
    running: set[subprocess.Popen[bytes]] = set()
    failed: list[QmdError] = []

    def call() -> None:
        try:
            run_qmd(wrapper, ["mcp"], env=env, cwd="/", timeout_s=60, running=running)
        except QmdError as err:
            failed.append(err)

    caller = threading.Thread(target=call)
    caller.start()
    while not (running and pidfile.exists()):
        time.sleep(0.05)
    time.sleep(0.5)
    for process in list(running):
        kill_group(process)
    caller.join(10)
    assert not caller.is_alive() and len(failed) == 1
    pgid = int(pidfile.read_text())
    for _ in range(50):
        if not live_group_members(pgid):
            break
        time.sleep(0.1)
    assert live_group_members(pgid) == []


def test_stderr_keeps_its_tail_without_failing(
    qmd_bin: str, env: dict[str, str], tmp_path: Path
) -> None:
    wrapper = fault_wrapper(
        tmp_path / "qmd-noisy",
        qmd_bin,
        'i=0; while [ $i -lt 3000 ]; do echo "progress line $i" >&2; i=$((i+1)); done\nexec "$REAL" "$@"',
    )
    out = run_qmd(wrapper, ["--version"], env=env, cwd="/", timeout_s=30, max_output_chars=1000)
    assert out.stdout.startswith("qmd ")
    assert len(out.stderr) <= 1000
    assert "progress line 2999" in out.stderr
