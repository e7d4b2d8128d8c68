"""Swappers for the race tests: a separate process that keeps changing what a memory path is.

`Swapper` runs this file as a script. In `exchange` mode it swaps each pair of paths with
`renameat2(RENAME_EXCHANGE)` (atomic: both names always exist, one of them a symlink to an outside
file or folder) in a tight loop; in `relink` mode it hard-links an outside file into memory and
unlinks it again. On SIGTERM it restores the starting arrangement and prints how many rounds it
made. `hammer` calls a function as fast as it can for a while and tallies the outcomes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

AT_FDCWD = -100
RENAME_EXCHANGE = 2
#: Seconds each race test hammers for; raise it to hunt for rarer interleavings.
RACE_SECONDS_ENV = "MEMORYD_RACE_SECONDS"
DEFAULT_RACE_SECONDS = 3.0


def race_seconds() -> float:
    return float(os.environ.get(RACE_SECONDS_ENV, DEFAULT_RACE_SECONDS))


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def exchange(a: Path | str, b: Path | str) -> None:
    """Atomically swap the directory entries `a` and `b` (Linux renameat2, glibc ≥ 2.28)."""
    libc = _libc()
    rc = libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE)
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(a))


def exchange_unsupported(folder: Path) -> str | None:
    """Why RENAME_EXCHANGE cannot be used in `folder`, or None when it can."""
    if not sys.platform.startswith("linux"):
        return "renameat2(RENAME_EXCHANGE) is Linux-only"
    if not hasattr(_libc(), "renameat2"):
        return "this libc has no renameat2 (glibc ≥ 2.28 needed)"
    a, b = folder / ".probe-a", folder / ".probe-b"
    a.write_text("a")
    b.write_text("b")
    try:
        exchange(a, b)
    except OSError as err:
        return f"renameat2(RENAME_EXCHANGE) fails here: {err}"
    finally:
        a.unlink()
        b.unlink()
    return None


class Swapper:
    """A swapper process for the duration of a `with` block; `rounds` is set when it exits."""

    def __init__(self, mode: str, pairs: Sequence[tuple[Path, Path]]) -> None:
        self.mode = mode
        self.pairs = list(pairs)
        self.rounds = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> Swapper:
        args = [sys.executable, __file__, self.mode]
        for a, b in self.pairs:
            args += [str(a), str(b)]
        self._proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if line.strip() != "ready":
            _, err = self._proc.communicate(timeout=10)
            raise RuntimeError(f"the swapper did not start: {line!r} {err}")
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        assert proc is not None
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise
        if proc.returncode != 0:
            raise RuntimeError(f"the swapper failed (exit {proc.returncode}): {err}")
        self.rounds = int(out.split()[-1])


@dataclass
class Tally:
    """What the hammered calls did: outcome → count, plus the unexpected exceptions (by repr)."""

    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)

    def __getitem__(self, outcome: str) -> int:
        return self.outcomes[outcome]


def hammer(
    seconds: float,
    call: Callable[[], str],
    expected: tuple[type[BaseException], ...],
    *,
    until: str | None = None,
) -> Tally:
    """Run `call` (it returns an outcome name) for `seconds`; `expected` exceptions count under
    their class name, anything else is recorded as unexpected. Stops early when `until` occurs.
    """
    tally = Tally()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        tally.calls += 1
        try:
            outcome = call()
        except expected as err:
            outcome = type(err).__name__
        except Exception as err:
            tally.unexpected.append(repr(err))
            if len(tally.unexpected) > 20:
                break
            continue
        tally.outcomes[outcome] += 1
        if outcome == until:
            break
    return tally


# --------------------------------------------------------------------------- the swapper process


def _run(mode: str, pairs: list[tuple[str, str]]) -> int:
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    libc = _libc()
    encoded = [(os.fsencode(a), os.fsencode(b)) for a, b in pairs]
    print("ready", flush=True)
    rounds = 0
    if mode == "exchange":
        while not stopping:
            for a, b in encoded:
                if libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) != 0:
                    raise OSError(ctypes.get_errno(), "renameat2 failed", a)
            rounds += 1
        if rounds % 2:  # every pair swapped an odd number of times: swap once more
            for a, b in encoded:
                libc.renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE)
    elif mode == "relink":
        while not stopping:
            for src, dst in encoded:
                with contextlib.suppress(FileExistsError):
                    os.link(src, dst)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(dst)
            rounds += 1
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    return rounds


def _main(argv: list[str]) -> None:
    mode, rest = argv[0], argv[1:]
    if len(rest) % 2 or not rest:
        raise SystemExit("usage: race_support.py exchange|relink A B [A B …]")
    pairs = list(zip(rest[::2], rest[1::2], strict=True))
    try:
        rounds = _run(mode, pairs)
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise SystemExit(f"a swapped path vanished: {err}") from None
        raise
    print(rounds, flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
