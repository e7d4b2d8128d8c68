"""Run one qmd command: hard timeout, whole-process-group kill, capped output, typed errors."""

from __future__ import annotations

import codecs
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import IO

from ..core.text import plain_text
from ..errors import QmdExitError, QmdOutputTooLarge, QmdTimeout, QmdUnavailable

DEFAULT_MAX_OUTPUT_CHARS = 200_000
_READ_CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class QmdOutput:
    """What a finished qmd call produced."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class _TooMuchOutput(Exception):
    pass


class _Capture:
    """Decodes a byte stream; stdout over the cap is an error, stderr keeps only its tail."""

    def __init__(self, limit: int, *, keep_tail: bool) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []
        self._size = 0
        self._limit = limit
        self._keep_tail = keep_tail

    def feed(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        if not text:
            return
        self._parts.append(text)
        self._size += len(text)
        if self._size > self._limit:
            if not self._keep_tail:
                raise _TooMuchOutput
            joined = "".join(self._parts)[-self._limit :]
            self._parts, self._size = [joined], len(joined)

    @property
    def text(self) -> str:
        return "".join(self._parts)


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
    check: bool = True,
    running: set[subprocess.Popen[bytes]] | None = None,
) -> QmdOutput:
    """Run `command args…`; the process sits in `running` so that its owner can kill it on close."""
    exe = resolve_command(command, env)
    if exe is None:
        raise QmdUnavailable(
            f"qmd not found: {command!r} is not an executable file or on PATH "
            "(run scripts/install-qmd or set memory.qmd.command)"
        )
    label = f"qmd {args[0]}" if args else "qmd"
    process = _spawn(exe, [exe, *args], env, cwd)
    if running is not None:
        running.add(process)
    try:
        returncode, stdout, stderr = _collect(process, label, timeout_s, max_output_chars)
    finally:
        if running is not None:
            running.discard(process)
    output = QmdOutput(tuple(args), returncode, stdout, stderr)
    if check and returncode != 0:
        raise QmdExitError(
            f"{label} exited with code {returncode}: {_last_line(output.stderr) or 'no stderr'}",
            returncode=returncode,
            stderr=output.stderr,
        )
    return output


def _collect(
    process: subprocess.Popen[bytes], label: str, timeout_s: float, max_output_chars: int
) -> tuple[int, str, str]:
    """The process's exit code and output, its whole group killed on any failure."""
    assert process.stdout is not None and process.stderr is not None
    started = time.monotonic()
    stdout = _Capture(max_output_chars, keep_tail=False)
    stderr = _Capture(max_output_chars, keep_tail=True)
    # both pipes are read on threads to their end, so neither can fill up and stall qmd
    readers = _Readers((process.stdout, stdout), (process.stderr, stderr))
    try:
        finished = readers.done.wait(timeout_s)
        if readers.too_much.is_set():
            raise QmdOutputTooLarge(
                f"{label} printed more than {max_output_chars} characters (process group killed)"
            )
        try:
            if not finished:
                raise subprocess.TimeoutExpired(label, timeout_s)
            returncode = process.wait(max(0.001, started + timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise QmdTimeout(
                f"{label} timed out after {timeout_s:g}s (process group killed)"
            ) from None
        # a clean exit can still leave helpers of the group behind: leave nothing running
        _signal_group(process.pid)
    except BaseException:
        kill_group(process)
        raise
    finally:
        readers.close()
    return returncode, stdout.text, stderr.text


def _spawn(exe: str, argv: list[str], env: Mapping[str, str], cwd: str) -> subprocess.Popen[bytes]:
    """qmd started in a session of its own (so its whole group can be killed)."""
    try:
        return subprocess.Popen(
            argv,
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


class _Readers:
    """One thread per pipe feeding its `_Capture`; `done` when all ended or stdout overflowed."""

    def __init__(self, *pipes: tuple[IO[bytes], _Capture]) -> None:
        self.done = threading.Event()
        self.too_much = threading.Event()
        self._left = len(pipes)
        self._lock = threading.Lock()
        self._pipes = [pipe for pipe, _ in pipes]
        self._threads = [
            threading.Thread(target=self._drain, args=pipe, daemon=True) for pipe in pipes
        ]
        for thread in self._threads:
            thread.start()

    def _drain(self, stream: IO[bytes], sink: _Capture) -> None:
        try:
            while data := stream.read1(_READ_CHUNK):  # type: ignore[attr-defined]
                sink.feed(data)
            sink.feed(b"", final=True)
        except _TooMuchOutput:
            self.too_much.set()
            self.done.set()
        except (OSError, ValueError):  # the pipe was closed under us: the process is gone
            pass
        finally:
            with self._lock:
                self._left -= 1
                if not self._left:
                    self.done.set()

    def close(self) -> None:
        """Wait briefly for the readers (the group is dead or done by now), close the pipes."""
        for thread in self._threads:
            thread.join(1.0)
        for pipe in self._pipes:
            with suppress(OSError):
                pipe.close()


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
