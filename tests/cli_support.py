"""Run `memoryd …` as its own process, without paying the interpreter's start-up on every call.

A suite run starts ~155 one-off `python -m memoryd` commands and ~40 `serve`/`mcp` processes. A
fresh interpreter spends ~0.4 CPU-s importing (pydantic, anyio, memoryd's modules) before it does
anything, an `mcp` one ~1 s more for the MCP SDK: together about a quarter of the suite's CPU.
`run_memoryd` (a one-off command, like `subprocess.run`) and `spawn_memoryd` (a long-running one,
like `subprocess.Popen`) keep the process boundary every such test relies on — a separate process
with its own environment, working directory, umask, resource limits, stdin/stdout/stderr, exit
status and signals — but start it by forking a *zygote*: a helper process that imported those
modules once.

What a forked run still exercises: argument parsing, config loading, state paths from the
environment it is given, every file and SQLite operation, exit codes, output, and anything the
command starts (qmd, serve forwarding). What it does not: importing memoryd in a fresh interpreter.
That stays covered by the tests that start `python -m memoryd` through `subprocess` directly
(`test_cli.py`'s real-process run and import probes, the `append` runs under a read-only mount,
`memoryd mcp` started by the MCP SDK's client in `test_mcp.py` and by `test_input_faults.py`,
the Inspector's HTTP server). `launcher_argv` serves clients that start the server themselves
(the Inspector over stdio, the SDK client of `test_surfaces_contract.py`).

The zygote imports only modules that read no environment at import time (the CLI reads it per
call). A run exits as the interpreter would (threads joined, atexit handlers, output flushed,
the same status) but skips the module teardown, which would copy every page it shares with the
zygote. `MEMORYD_TEST_FORK=0` runs every call as a fresh interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

#: Imported once by the zygote (what a one-off CLI call imports at start-up and on its way to a
#: search); numpy is left out: the local model limits its BLAS threads before numpy loads.
PRELOAD = (
    "memoryd.cli",
    "memoryd.config",
    "memoryd.config_files",
    "memoryd.orchestrator",
    "memoryd.orchestrator.service",
    "memoryd.builtin_index",
    "memoryd.tools",
    "memoryd.mcp_server",
    "anyio",
    "anyio._backends._asyncio",
    "sqlite3",
)

_lock = threading.Lock()
_zygote: tuple[subprocess.Popen[bytes], str] | None = None


def _fork_enabled() -> bool:
    return os.environ.get("MEMORYD_TEST_FORK", "1") != "0"


def _prepare(
    argv: list[str] | tuple[str, ...], env: dict[str, str] | None, cwd: Path | str | None
) -> tuple[list[str], dict[str, str], str, str | None]:
    """The command line, environment and directory of a run, and the zygote's socket (None:
    start a fresh interpreter)."""
    cmd = [sys.executable, "-m", "memoryd", *argv]
    environ = dict(os.environ if env is None else env)
    workdir = os.path.abspath(cwd) if cwd is not None else os.getcwd()
    return cmd, environ, workdir, _zygote_path() if _fork_enabled() else None


def run_memoryd(
    argv: list[str] | tuple[str, ...],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    input: str | None = None,
    timeout: float = 60.0,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([python, -m, memoryd, *argv], capture_output=True, text=True, …)`, forked
    from the zygote: the same `CompletedProcess` (negative returncode for a signal) or the same
    `subprocess.TimeoutExpired`. stdin is `input`, or empty when `input` is None."""
    cmd, environ, workdir, zygote = _prepare(argv, env, cwd)
    if zygote is None:
        return subprocess.run(
            cmd,
            env=environ,
            cwd=workdir,
            input=input if input is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return _forked(cmd, argv, environ, workdir, input, timeout, zygote)


def _forked(
    cmd: list[str],
    argv: list[str] | tuple[str, ...],
    environ: dict[str, str],
    workdir: str,
    input: str | None,
    timeout: float,
    zygote: str,
) -> subprocess.CompletedProcess[str]:
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        conn = _request(zygote, [in_r, out_w, err_w], argv, environ, workdir)
    except OSError:
        for fd in (in_r, in_w, out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    feeder = threading.Thread(target=_feed, args=(in_w, (input or "").encode()), daemon=True)
    feeder.start()
    status_fd = conn.fileno()
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: [], status_fd: []}
    sel = selectors.DefaultSelector()
    for fd in chunks:
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    pid: int | None = None
    try:
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                pid = pid or _pid_of(chunks[status_fd])
                if pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(
                    cmd,
                    timeout,
                    output=b"".join(chunks[out_r]).decode(errors="replace"),
                    stderr=b"".join(chunks[err_r]).decode(errors="replace"),
                )
            for key, _ in sel.select(left):
                fd = int(key.fd)
                data = os.read(fd, 65536)
                if data:
                    chunks[fd].append(data)
                else:
                    sel.unregister(fd)
    finally:
        sel.close()
        conn.close()
        os.close(out_r)
        os.close(err_r)
        feeder.join(5)
    lines = b"".join(chunks[status_fd]).decode().split()
    if len(lines) != 2:
        raise RuntimeError(f"the CLI zygote gave no exit status for {cmd}: {lines!r}")
    return subprocess.CompletedProcess(
        cmd,
        int(lines[1]),
        b"".join(chunks[out_r]).decode(),
        b"".join(chunks[err_r]).decode(),
    )


Stream = int | IO[Any] | None


def spawn_memoryd(
    argv: list[str] | tuple[str, ...],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | str | None = None,
    stdin: Stream = None,
    stdout: Stream = None,
    stderr: Stream = None,
) -> subprocess.Popen[str] | ForkedProcess:
    """`subprocess.Popen([python, -m, memoryd, *argv], text=True, …)` for a long-running
    command (`serve`, `mcp`), forked from the zygote. Each stream is `subprocess.PIPE`,
    `subprocess.DEVNULL`, a file (object or descriptor) or None (this process's own)."""
    cmd, environ, workdir, zygote = _prepare(argv, env, cwd)
    if zygote is None:
        return subprocess.Popen(
            cmd, env=environ, cwd=workdir, stdin=stdin, stdout=stdout, stderr=stderr, text=True
        )
    child_fds: list[int] = []
    to_close: list[int] = []
    ours: list[IO[str] | None] = []
    for target, stream in enumerate((stdin, stdout, stderr)):
        if stream == subprocess.PIPE:
            r, w = os.pipe()
            mine, theirs = (w, r) if target == 0 else (r, w)
            ours.append(open(mine, "w" if target == 0 else "r", encoding="utf-8"))  # noqa: SIM115
            child_fds.append(theirs)
            to_close.append(theirs)
        elif stream == subprocess.DEVNULL:
            fd = os.open(os.devnull, os.O_RDWR)
            child_fds.append(fd)
            to_close.append(fd)
            ours.append(None)
        elif stream is None:
            child_fds.append(target)
            ours.append(None)
        else:
            child_fds.append(stream if isinstance(stream, int) else stream.fileno())
            ours.append(None)
    try:
        conn = _request(zygote, child_fds, argv, environ, workdir)
    finally:
        for fd in to_close:
            os.close(fd)
    return ForkedProcess(cmd, conn, *ours)


class ForkedProcess:
    """The part of `subprocess.Popen` the tests use, for a run forked from the zygote (which
    reports the run's pid, then its exit status, on `conn`)."""

    def __init__(
        self,
        args: list[str],
        conn: socket.socket,
        stdin: IO[str] | None,
        stdout: IO[str] | None,
        stderr: IO[str] | None,
    ) -> None:
        self.args = args
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None
        self._conn = conn
        self._status = conn.makefile("rb")
        self.pid = int(self._status.readline())
        self._done = threading.Event()
        threading.Thread(target=self._await_exit, daemon=True).start()

    def _await_exit(self) -> None:
        line = self._status.readline()
        self.returncode = int(line) if line.strip() else -signal.SIGKILL
        self._status.close()
        self._conn.close()
        self._done.set()

    def poll(self) -> int | None:
        return self.returncode if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if not self._done.is_set():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(
        self, input: str | None = None, timeout: float | None = None
    ) -> tuple[str | None, str | None]:
        if self.stdin is not None:
            with contextlib.suppress(BrokenPipeError):
                if input:
                    self.stdin.write(input)
                self.stdin.close()
        out = self.stdout.read() if self.stdout is not None else None
        err = self.stderr.read() if self.stderr is not None else None
        self.wait(timeout)
        return out, err

    def __enter__(self) -> ForkedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdin, self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self.wait()


def _request(
    zygote: str, fds: list[int], argv: list[str] | tuple[str, ...], env: dict[str, str], cwd: str
) -> socket.socket:
    """Ask the zygote for a run with these descriptors as its stdin, stdout and stderr."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(zygote)
        socket.send_fds(conn, [b"F"], fds)
        request = {"argv": list(argv), "env": env, "cwd": cwd, **_inherited()}
        conn.sendall(json.dumps(request).encode())
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        conn.close()
        raise
    return conn


def launcher_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """A command line that runs `memoryd <argv>` forked from this process's zygote, for a client
    that starts its server itself (the MCP SDK's stdio client, the Inspector): a small launcher
    (a fresh interpreter importing nothing of memoryd) hands the run its own stdin, stdout and
    stderr, passes on the signals it gets, and exits as the run did."""
    zygote = _zygote_path() if _fork_enabled() else None
    if zygote is None:
        return [sys.executable, "-m", "memoryd", *argv]
    return [sys.executable, __file__, "launch", zygote, *argv]


def _launch(zygote: str, argv: list[str]) -> None:
    conn = _request(zygote, [0, 1, 2], argv, dict(os.environ), os.getcwd())
    status = conn.makefile("rb")
    pid = int(status.readline())

    def forward(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    line = status.readline()
    code = int(line) if line.strip() else -signal.SIGKILL
    if code < 0:  # killed by a signal: die of the same one
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


def _inherited() -> dict[str, Any]:
    """What a child inherits from this process besides its environment: the umask and the
    resource limits (tests lower RLIMIT_FSIZE, or set a umask, around a CLI call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    limits = {
        name: list(resource.getrlimit(getattr(resource, name)))
        for name in dir(resource)
        if name.startswith("RLIMIT_")
    }
    return {"umask": mask, "rlimits": limits}


def _pid_of(chunks: list[bytes]) -> int | None:
    first = b"".join(chunks).split(b"\n", 1)[0]
    return int(first) if first.strip().isdigit() else None


def _feed(fd: int, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError), open(fd, "wb", closefd=True) as pipe:
        pipe.write(data)


def _zygote_path() -> str | None:
    """The socket of this process's zygote, started on first use; None if it cannot start
    (then calls run as fresh interpreters)."""
    global _zygote
    with _lock:
        if _zygote is not None and _zygote[0].poll() is None:
            return _zygote[1]
        folder = tempfile.mkdtemp(prefix="memoryd-zygote-")
        path = os.path.join(folder, "s")
        proc = subprocess.Popen(
            [sys.executable, __file__, "serve", path],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYDANTIC_DISABLE_PLUGINS": "__all__"},
        )
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        if ready.strip() != b"ready":
            proc.kill()
            proc.wait()
            return None
        _zygote = (proc, path)
        atexit.register(_stop, proc, folder)
        return path


def _stop(proc: subprocess.Popen[bytes], folder: str) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(folder, "s"))
        os.rmdir(folder)


# -- the zygote ---------------------------------------------------------------------------------


def _serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    # the imported objects move to a generation the collector never scans: a run's collections
    # then do not touch (and copy) the pages it shares with this process
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    signal.signal(signal.SIGTERM, _leave)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        _reap()
        _msg, fds, _flags, _addr = socket.recv_fds(conn, 1, 3)
        body = b""
        while data := conn.recv(65536):
            body += data
        if os.fork() == 0:
            listener.close()
            _wait_for_run(conn, json.loads(body), fds)  # never returns in the waiter
            # the run itself returns here and leaves through the interpreter's shutdown
            return
        conn.close()
        for fd in fds:
            os.close(fd)


def _leave(_signum: int, _frame: object) -> None:
    _reap()
    os._exit(0)


def _reap() -> None:
    """Collect the waiters that have finished. Reaped (not left to SIGCHLD = SIG_IGN), their CPU
    time, and their runs', adds up in this process and so in the suite's: `time scripts/test`
    counts it."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _wait_for_run(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the waiter: fork the run, report its pid and exit status on `conn`."""
    pid = os.fork()
    if pid == 0:
        conn.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _become_run(request, fds)
        return
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
    finally:
        os._exit(0)


def _become_run(request: dict[str, Any], fds: list[int]) -> None:
    """Turn this fork into `python -m memoryd <argv>` with the request's environment."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    for name, (soft, hard) in request["rlimits"].items():
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(getattr(resource, name), (soft, hard))
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [str(Path(__file__).resolve().parent.parent / "src/memoryd/__main__.py")]
    sys.argv += request["argv"]
    sys.path[0] = request["cwd"]  # `python -m` puts the working directory first
    encoding = os.environ.get("PYTHONIOENCODING", "").split(":")[0] or "utf-8"
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
    )
    from memoryd.cli import main

    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    _leave_like_an_interpreter(code)


def _leave_like_an_interpreter(code: object) -> None:
    """Exit as `python -m memoryd` would — non-daemon threads joined, atexit handlers run,
    output flushed, the same status — without tearing down the modules shared with the zygote:
    that teardown touches every page the fork shares, and cost more CPU than the command."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status & 0xFF)


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2])
    elif sys.argv[1:2] == ["launch"]:
        _launch(sys.argv[2], sys.argv[3:])
