"""Run one qmd command: hard timeout, whole-process-group kill, capped output, typed errors."""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress

from ..core.text import plain_text
from ..errors import QmdExitError, QmdOutputTooLarge, QmdTimeout, QmdUnavailable

DEFAULT_MAX_OUTPUT_CHARS = 200_000
_READ_CHUNK = 65_536


def resolve_command(command: str, env: Mapping[str, str] | None = None) -> str | None:
    """Absolute path of the qmd executable, or None when it cannot be found."""
    path = (env or os.environ).get("PATH")
    return shutil.which(os.path.expanduser(command), path=path)


def run_qmd(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    timeout_s: float,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    running: set[subprocess.Popen[bytes]] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `command args…`, a non-zero exit being `QmdExitError`; the process sits in `running`
    so that its owner can kill it on close."""
    exe = resolve_command(command, env)
    if exe is None:
        raise QmdUnavailable(
            f"qmd not found: {command!r} is not an executable file or on PATH "
            "(run scripts/install-qmd or set memory.qmd.command)"
        )
    label = f"qmd {args[0]}" if args else "qmd"
    try:  # in a session of its own, so that its whole group can be killed
        process = subprocess.Popen(
            [exe, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            # qmd writes its index and config into the agent's private state: keep them 0600
            umask=0o077,
        )
    except OSError as err:
        raise QmdUnavailable(f"cannot start qmd ({exe}): {err.strerror or err}") from None
    if running is not None:
        running.add(process)
    try:
        returncode, stdout, stderr = _collect(process, label, timeout_s, max_output_chars)
    finally:
        if running is not None:
            running.discard(process)
    if returncode != 0:
        raise QmdExitError(
            f"{label} exited with code {returncode}: {_last_line(stderr) or 'no stderr'}",
            returncode=returncode,
            stderr=stderr,
        )
    return subprocess.CompletedProcess([exe, *args], returncode, stdout, stderr)


def _collect(
    process: subprocess.Popen[bytes], label: str, timeout_s: float, max_output_chars: int
) -> tuple[int, str, str]:
    """The process's exit code and output, its whole group killed on any failure."""
    assert process.stdout is not None and process.stderr is not None
    deadline = time.monotonic() + timeout_s
    too_large = QmdOutputTooLarge(
        f"{label} printed more than {max_output_chars} characters (process group killed)"
    )
    timed_out = QmdTimeout(f"{label} timed out after {timeout_s:g}s (process group killed)")
    cap = 4 * max_output_chars  # bytes: no UTF-8 character takes more than 4
    out, err = bytearray(), bytearray()
    sinks = {process.stdout.fileno(): out, process.stderr.fileno(): err}
    try:
        # both pipes are read to their end, so neither can fill up and stall qmd
        with selectors.DefaultSelector() as selector:
            for fd in sinks:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    raise timed_out
                for key, _ in selector.select(left_s):
                    data = os.read(key.fd, _READ_CHUNK)
                    sink = sinks[key.fd]
                    sink += data
                    if not data:
                        selector.unregister(key.fd)
                    elif sink is out and len(out) > cap:
                        raise too_large
                    elif sink is err:
                        del err[:-cap]  # stderr keeps only its tail
        try:
            returncode = process.wait(max(0.001, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise timed_out from None
        # a clean exit can still leave helpers of the group behind: leave nothing running
        _signal_group(process.pid)
    except BaseException:
        kill_group(process)
        raise
    finally:
        for pipe in (process.stdout, process.stderr):
            with suppress(OSError):
                pipe.close()
    stdout = out.decode("utf-8", errors="replace")
    if len(stdout) > max_output_chars:
        raise too_large
    return returncode, stdout, err.decode("utf-8", errors="replace")[-max_output_chars:]


def _signal_group(pgid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process's whole group and reap it."""
    # the leader's pid is the pgid: kill before reaping so the pgid cannot have been reused
    if process.returncode is None:
        _signal_group(process.pid)
    with suppress(subprocess.TimeoutExpired):
        process.wait(5)


_ERROR_LINE = re.compile(r"^[A-Za-z]*Error:")
_NOT_FOUND = re.compile(r"\bnot found\b|\bno .{0,40}\bfound\b", re.IGNORECASE)
# lines that never say what failed: qmd's generic hints and warnings, node's version, stack frames
_NOISE_LINE = re.compile(
    r"^(?:If qmd still behaves unexpectedly|Run 'qmd [^']*' for|QMD Warning:|Node\.js v\d|at )"
)


def _last_line(text: str) -> str:
    """The line of qmd's stderr that says what went wrong, as plain text (≤ 300 characters)."""
    lines = [line.strip() for line in plain_text(text).splitlines()]
    lines = [line for line in lines if line and not _NOISE_LINE.match(line)]
    # node's "Error: …" sits above its stack, qmd's own message above a generic hint
    for line in lines:
        if _ERROR_LINE.match(line) or _NOT_FOUND.search(line):
            return line[:300]
    return lines[-1][:300] if lines else ""
