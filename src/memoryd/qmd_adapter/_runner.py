"""Run one qmd command: hard timeout, whole-process-group kill, capped output, typed errors.

qmd's npm launcher spawns node and does not forward signals, so every call starts in a new
session and a timeout (or cancellation) SIGKILLs the whole group: nothing qmd started survives.
"""

from __future__ import annotations

import codecs
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress

import anyio
from anyio.abc import ByteReceiveStream, Process

from ..core.records import record
from ..core.text import plain_text
from ..errors import QmdExitError, QmdOutputTooLarge, QmdTimeout, QmdUnavailable

__all__ = ["DEFAULT_MAX_OUTPUT_CHARS", "QmdOutput", "resolve_command", "run_qmd"]

DEFAULT_MAX_OUTPUT_CHARS = 200_000
_READ_CHUNK = 65_536


@record
class QmdOutput:
    """What a finished qmd call produced."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float


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


async def run_qmd(
    command: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    timeout_s: float,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
    check: bool = True,
) -> QmdOutput:
    """Run `command args…` and return its output.

    Raises `QmdUnavailable` (binary missing / not executable), `QmdTimeout` (group killed),
    `QmdOutputTooLarge` (stdout over `max_output_chars`, group killed), and with `check`,
    `QmdExitError` on a non-zero exit.
    """
    exe = resolve_command(command, env)
    if exe is None:
        raise QmdUnavailable(
            f"qmd not found: {command!r} is not an executable file or on PATH "
            "(run scripts/install-qmd or set memory.qmd.command)"
        )
    argv = [exe, *args]
    label = f"qmd {args[0]}" if args else "qmd"
    started = time.monotonic()
    try:
        process = await anyio.open_process(
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

    stdout = _Capture(max_output_chars, keep_tail=False)
    stderr = _Capture(max_output_chars, keep_tail=True)
    try:
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as tg:
                assert process.stdout is not None and process.stderr is not None
                tg.start_soon(_drain, process.stdout, stdout)
                tg.start_soon(_drain, process.stderr, stderr)
            returncode = await process.wait()
    except TimeoutError:
        await _kill_group(process)
        raise QmdTimeout(f"{label} timed out after {timeout_s:g}s (process group killed)") from None
    except BaseException as err:
        await _kill_group(process)
        if _is_too_much(err):
            raise QmdOutputTooLarge(
                f"{label} printed more than {max_output_chars} characters (process group killed)"
            ) from None
        raise
    # A clean exit can still leave helpers of the group behind: leave nothing running.
    _signal_group(process.pid)
    await process.aclose()
    output = QmdOutput(
        tuple(args), returncode, stdout.text, stderr.text, time.monotonic() - started
    )
    if check and returncode != 0:
        raise QmdExitError(
            f"{label} exited with code {returncode}: {_last_line(output.stderr) or 'no stderr'}",
            returncode=returncode,
            stderr=output.stderr,
        )
    return output


def _is_too_much(err: BaseException) -> bool:
    if isinstance(err, _TooMuchOutput):
        return True
    if isinstance(err, BaseExceptionGroup):
        return any(_is_too_much(e) for e in err.exceptions)
    return False


async def _drain(stream: ByteReceiveStream, sink: _Capture) -> None:
    while True:
        try:
            data = await stream.receive(_READ_CHUNK)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            sink.feed(b"", final=True)
            return
        sink.feed(data)


def _signal_group(pgid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _kill_group(process: Process) -> None:
    # The group leader's pid is the pgid (start_new_session); kill before reaping so the
    # pgid cannot have been reused.
    _signal_group(process.pid)
    with anyio.CancelScope(shield=True):
        with anyio.move_on_after(5):
            await process.wait()
        await process.aclose()


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
    # node prints "Error: …" / "SqliteError: …" above its stack; qmd prints its own message
    # ("No model file found at …", "Collection not found: …") above a generic hint line
    for line in lines:
        if _ERROR_LINE.match(line) or _NOT_FOUND.search(line):
            return line[:300]
    return lines[-1][:300] if lines else ""
