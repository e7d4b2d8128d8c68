"""Progress of long work (`memoryd index`) on stderr, so that `--json` output stays clean."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

#: What each phase counts, as the user reads it: (label, unit).
PHASES: dict[str, tuple[str, str]] = {
    "files": ("scanning", "files"),
    "vectors": ("embedding", "chunks"),
}


#: Seconds between two plain progress lines.
LINE_INTERVAL_S = 5.0


def format_duration(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`: short enough for a progress line."""
    s = max(round(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def describe(phase: str, done: int, total: int, elapsed: float) -> str:
    """One plain progress line: `embedding 48/268 chunks (18%), 1.6 chunks/s, ETA 2m17s`."""
    label, unit = PHASES.get(phase, (phase, "items"))
    line = f"{label} {done}/{total} {unit}"
    if total > 0:
        line += f" ({100 * done // total}%)"
    if done <= 0 or elapsed <= 0:
        return line + ", starting"
    rate = done / elapsed
    line += f", {rate:.1f} {unit}/s"
    if done >= total:
        return line + f", done in {format_duration(elapsed)}"
    return line + f", ETA {format_duration((total - done) / rate)}"


@dataclass
class _Phase:
    started: float
    last_line: float = float("-inf")
    task: Any = None
    ended: bool = False


@dataclass
class ProgressReporter:
    """A `ProgressFn` for the CLI: a rich bar on a terminal, plain lines otherwise."""

    stream: IO[str] = field(default_factory=lambda: sys.stderr)
    #: Unset: whether `stream` is a terminal.
    tty: bool | None = None
    clock: Callable[[], float] = time.monotonic
    _phases: dict[str, _Phase] = field(default_factory=dict)
    _bar: Any = None

    def __enter__(self) -> ProgressReporter:
        if self.tty is None:
            self.tty = self.stream.isatty()
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            # beside the bar, the plain line: the same rate and ETA from the first batch
            columns = (BarColumn(), TextColumn("{task.description}"))
            self._bar = Progress(*columns, transient=True, console=Console(file=self.stream))
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    def __call__(self, phase: str, done: int, total: int) -> None:
        now = self.clock()
        state = self._phases.setdefault(phase, _Phase(started=now))
        if self._bar is not None:
            line = describe(phase, done, total, now - state.started)
            if state.task is None:
                state.task = self._bar.add_task(line, total=total)
            self._bar.update(state.task, completed=done, total=total, description=line)
            return
        finished = total > 0 and done >= total
        if state.ended or (not finished and now - state.last_line < LINE_INTERVAL_S):
            return
        state.last_line = now
        state.ended = finished
        line = describe(phase, done, total, now - state.started)
        print("memoryd index: " + line, file=self.stream, flush=True)
