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


def _rate(done: int, elapsed: float) -> float | None:
    return done / elapsed if done > 0 and elapsed > 0 else None


def describe(phase: str, done: int, total: int, elapsed: float) -> str:
    """One plain progress line: `embedding 48/268 chunks (18%), 1.6 chunks/s, ETA 2m17s`."""
    label, unit = PHASES.get(phase, (phase, "items"))
    line = f"{label} {done}/{total} {unit}"
    if total > 0:
        line += f" ({100 * done // total}%)"
    rate = _rate(done, elapsed)
    if rate is None:
        return line + ", starting"
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
            self._bar = _rich_bar(self.stream)
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
            if state.task is None:
                label, unit = PHASES.get(phase, (phase, "items"))
                state.task = self._bar.add_task(label, total=total, unit=unit, rate=None, eta=None)
            rate = _rate(done, now - state.started)
            eta = None if rate is None else max(total - done, 0) / rate
            self._bar.update(state.task, completed=done, total=total, rate=rate, eta=eta)
            return
        finished = total > 0 and done >= total
        if state.ended or (not finished and now - state.last_line < LINE_INTERVAL_S):
            return
        state.last_line = now
        state.ended = finished
        print(
            "memoryd index: " + describe(phase, done, total, now - state.started), file=self.stream
        )
        self.stream.flush()


def _rich_bar(stream: IO[str]) -> Any:
    """A transient rich bar whose rate and ETA columns read the reporter's own figures."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
    from rich.text import Text

    class _RateEta(ProgressColumn):
        def render(self, task: Task) -> Text:
            rate, eta, unit = task.fields.get("rate"), task.fields.get("eta"), task.fields["unit"]
            if rate is None:
                return Text("starting…", style="progress.remaining")
            return Text(
                f"{rate:.1f} {unit}/s · ETA {format_duration(eta or 0.0)}",
                style="progress.remaining",
            )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} {task.fields[unit]}"),
        _RateEta(),
        transient=True,
        console=Console(file=stream),
    )
