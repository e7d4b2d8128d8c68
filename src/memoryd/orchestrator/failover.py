"""The pure failover state machine (every method takes `now`); rules in docs/qmd.md."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final, Literal

from ..config import FailoverConfig
from ..core.text import plain_text

Active = Literal["qmd", "builtin"]
MAX_REASON_CHARS: Final = 300


def clean_reason(text: str) -> str:
    """One plain line of at most `MAX_REASON_CHARS` characters (ANSI escapes and controls removed)."""
    text = plain_text(text)
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    text = " ".join(text.split())
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 1] + "…"
    return text


@dataclass(frozen=True, slots=True)
class FailoverState:
    """Where an agent's searches go and why; persisted in `health.json` by `AgentBackend`."""

    active: Active = "qmd"
    failures: int = 0
    reason: str | None = None
    since: float | None = None
    last_error_at: float | None = None
    probe_attempts: int = 0
    next_probe_at: float | None = None
    last_probe_at: float | None = None
    last_probe_error: str | None = None
    recovered_at: float | None = None


def probe_delay(settings: FailoverConfig, attempts: int) -> float:
    """Seconds from a failed probe to the next: cooldown · 2^attempts, capped."""
    base = max(0.05, settings.cooldown_ms / 1000) * float(2 ** min(attempts, 16))
    return float(min(settings.probe_max_interval_ms / 1000, base))


class Failover:
    """The mutable holder of a `FailoverState`, applying the rules."""

    def __init__(self, settings: FailoverConfig) -> None:
        self.settings = settings
        self.state = FailoverState()

    @property
    def active(self) -> Active:
        return self.state.active

    def record_failure(self, reason: str, now: float) -> bool:
        """A qmd search failed. Returns True when this failure flipped the agent to builtin."""
        st = self.state
        reason = clean_reason(reason)
        failures = st.failures + 1
        if st.active == "qmd" and failures >= self.settings.failure_threshold:
            self.state = FailoverState(  # a new failover: only the last probe's time carries over
                active="builtin",
                failures=failures,
                reason=reason,
                since=now,
                last_error_at=now,
                next_probe_at=now + self.settings.cooldown_ms / 1000,
                last_probe_at=st.last_probe_at,
            )
            return True
        self.state = replace(
            st,
            failures=failures,
            last_error_at=now,
            reason=st.reason if st.active == "builtin" and st.reason else reason,
        )
        return False

    def record_success(self, now: float) -> bool:
        """qmd answered. Returns True when this brought the agent back from builtin."""
        st = self.state
        back = st.active == "builtin"
        self.state = FailoverState(
            active="qmd",
            recovered_at=now if back else st.recovered_at,
            probe_attempts=st.probe_attempts,
            last_probe_at=st.last_probe_at,
        )
        return back

    def probe_due(self, now: float) -> bool:
        """A recovery probe should run now (only while failed over)."""
        st = self.state
        return st.active == "builtin" and st.next_probe_at is not None and now >= st.next_probe_at

    def record_probe_failure(self, error: str, now: float, jitter_s: float = 0.0) -> None:
        """A probe failed: count it, keep its error apart from the reason, schedule the next."""
        st = self.state
        attempts = st.probe_attempts + 1
        self.state = replace(
            st,
            probe_attempts=attempts,
            last_probe_at=now,
            last_probe_error=clean_reason(error),
            next_probe_at=now + probe_delay(self.settings, attempts) + max(0.0, jitter_s),
        )

    def record_probe_success(self, now: float) -> None:
        st = self.state
        self.state = replace(st, probe_attempts=st.probe_attempts + 1, last_probe_at=now)
        self.record_success(now)
