"""The failover/recovery state machine, fast: a fake qmd engine and a fake clock, real built-in index.

The real qmd process edges (a hung process killed by the timeout, garbage on stdout) keep their
own tests in test_orchestrator.py; everything about *when* an agent fails over, probes and comes
back is pinned here, on asyncio and trio.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import agent_for, background, index_for, within, write
from memoryd.config import FailoverConfig, ResolvedAgent
from memoryd.core.engine import SearchOutput, SearchRequest
from memoryd.core.layout import MemoryRoot, default_roots
from memoryd.core.results import FileText, SearchResult
from memoryd.core.status import CollectionStatus, QmdStatus
from memoryd.errors import QmdBadOutput, QmdError, QmdTimeout, QmdUnavailable, ServiceUnavailable
from memoryd.orchestrator import MemoryService
from memoryd.orchestrator._supervisor import AgentBackend
from memoryd.orchestrator.failover import (
    MAX_REASON_CHARS,
    Failover,
    clean_reason,
    probe_delay,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeQmd:
    """A QmdEngine whose searches succeed or raise what the test says; counts every call."""

    name = "qmd"

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self.fault: QmdError | None = None
        self.empty = False
        self.searches = 0
        self.started = 0
        #: called by the status() call after next (see the status-consistency test)
        self.on_second_status: Callable[[], None] | None = None
        self._statuses = 0

    @property
    def search_mode(self) -> str:
        return "search"

    def start(self, task_group: Any = None) -> None:
        self.started += 1

    def search(self, request: SearchRequest) -> SearchOutput:
        self.searches += 1
        if self.fault is not None:
            raise self.fault
        if self.empty:
            return SearchOutput([], "qmd", "qmd", None, "search", 4000)
        hit = SearchResult("MEMORY.md", 1, 1, 0.9, "from qmd")
        return SearchOutput([hit], "qmd", "qmd", None, "search", 4000)

    def get(self, path: str, from_line: int | None, lines: int | None) -> FileText:
        return FileText(path, "")

    def sync(self, *, force: bool = False, progress: Any = None) -> bool:
        return True

    def notify_changed(self) -> None:
        pass

    def status(self) -> QmdStatus:
        if self.on_second_status is not None:
            self._statuses += 1
            if self._statuses == 2:
                self.on_second_status()
                self.on_second_status = None
        return QmdStatus(
            command="fake",
            version="qmd 2.8.3",
            home=str(self.workspace),
            search_mode="search",
            collections=[
                CollectionStatus(name="memory-root-main", path="/", pattern="x", source="memory")
            ],
        )

    def roots(self) -> list[MemoryRoot]:
        return default_roots(str(self.workspace))

    def probe(self) -> None:
        if self.fault is not None:
            raise self.fault

    def reset(self) -> list[str]:
        return []

    def bounded(self, deadline: float | None) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def close(self) -> None:
        pass


def qmd_agent(ws: Path, **failover: Any) -> ResolvedAgent:
    fo = {"failureThreshold": 1, "cooldownMs": 15_000, "probeMaxIntervalMs": 300_000, **failover}
    return agent_for(ws, {"provider": "none"}, memory={"backend": "qmd", "qmd": {"failover": fo}})


@pytest.fixture
def ws(workspace: Path) -> Path:
    write(workspace / "MEMORY.md", "# Memory\n\nAlice likes green tea.\n")
    return workspace


def backend(agent: ResolvedAgent, qmd: FakeQmd, clock: Clock) -> AgentBackend:
    return AgentBackend(
        agent,
        qmd_factory=lambda _a: qmd,
        index_factory=lambda a: index_for(a, None),
        clock=clock,
        jitter=lambda _scale: 0.0,
    )


# ---------------------------------------------------------------- the pure policy


def test_the_threshold_decides_when_to_fail_over() -> None:
    fo = Failover(
        FailoverConfig(failure_threshold=3, cooldown_ms=10_000, probe_max_interval_ms=60_000)
    )
    assert not fo.record_failure("a", 0) and not fo.record_failure("b", 1)
    assert fo.active == "qmd"
    assert fo.record_failure("c", 2) and fo.active == "builtin"
    assert fo.state.reason == "c" and fo.state.since == 2 and fo.state.next_probe_at == 12


def test_probes_back_off_doubling_up_to_the_cap() -> None:
    settings = FailoverConfig(cooldown_ms=15_000, probe_max_interval_ms=300_000)
    assert [probe_delay(settings, n) for n in range(1, 7)] == [30, 60, 120, 240, 300, 300]
    fo = Failover(settings)
    fo.record_failure("boom", 0)
    assert not fo.probe_due(14.9) and fo.probe_due(15)
    fo.record_probe_failure("still down", 15)
    assert fo.state.next_probe_at == 45 and fo.state.probe_attempts == 1


def test_probe_errors_never_grow_the_reason() -> None:
    fo = Failover(FailoverConfig(cooldown_ms=1000))
    fo.record_failure("QmdTimeout: search timed out", 0)
    for n in range(50):
        fo.record_probe_failure(f"probe {n}: still down", 1 + n)
    assert fo.state.reason == "QmdTimeout: search timed out"
    assert fo.state.last_probe_error == "probe 49: still down"


def test_reasons_are_plain_single_lines_and_bounded() -> None:
    raw = "\x1b[31mError:\x1b[0m line one\nline two\t" + "x" * 1000
    clean = clean_reason(raw)
    assert (
        "\x1b" not in clean and "\n" not in clean and clean.startswith("Error: line one line two")
    )
    assert len(clean) == MAX_REASON_CHARS


def test_success_brings_the_agent_back_and_resets_failures() -> None:
    fo = Failover(FailoverConfig())
    fo.record_failure("x", 0)
    assert fo.record_success(5) and fo.active == "qmd"
    assert fo.state.failures == 0 and fo.state.recovered_at == 5 and fo.state.reason is None
    assert not fo.record_success(6)


# ---------------------------------------------------------------- the backend, with fakes


@pytest.mark.parametrize(
    "fault",
    [QmdTimeout("search timed out after 4s"), QmdBadOutput("not json"), QmdUnavailable("gone")],
    ids=["timeout", "garbage", "missing"],
)
def test_a_failure_is_answered_by_the_builtin_index_in_the_same_call(
    ws: Path, fault: QmdError
) -> None:
    clock, qmd = Clock(), FakeQmd(ws)
    b = backend(qmd_agent(ws), qmd, clock)
    assert (b.search(SearchRequest("green tea"))).engine == "qmd"
    qmd.fault = fault
    answer = b.search(SearchRequest("green tea"))
    assert answer.engine == "builtin" and answer.results[0].path == "MEMORY.md"
    assert answer.fallback is not None and type(fault).__name__ in answer.fallback["reason"]
    # failed over: the next searches do not touch qmd at all during the cool-down
    calls = qmd.searches
    for _ in range(5):
        assert (b.search(SearchRequest("green tea"))).engine == "builtin"
    assert qmd.searches == calls
    b.close()


def test_one_shot_processes_probe_inline_once_due_and_come_back(ws: Path) -> None:
    clock, qmd = Clock(), FakeQmd(ws)
    b = backend(qmd_agent(ws, cooldownMs=15_000), qmd, clock)
    qmd.fault = QmdTimeout("hung")
    b.search(SearchRequest("tea"))
    clock.advance(10)
    assert (b.search(SearchRequest("tea"))).engine == "builtin"  # not due yet
    clock.advance(5)
    b.search(SearchRequest("tea"))  # due: probes inline, still failing
    assert b.failover.state.probe_attempts == 1 and b.failover.state.next_probe_at == clock.now + 30
    qmd.fault = None
    clock.advance(30)
    assert (b.search(SearchRequest("tea"))).engine == "qmd"
    assert b.failover.state.recovered_at == clock.now
    b.close()


def test_the_probe_loop_recovers_in_the_background(ws: Path) -> None:
    qmd = FakeQmd(ws)
    b = AgentBackend(
        qmd_agent(ws, cooldownMs=20, probeMaxIntervalMs=40),
        qmd_factory=lambda _a: qmd,
        index_factory=lambda a: index_for(a, None),
    )
    with background() as tg:
        b.start(tg)
        qmd.fault = QmdBadOutput("garbage")
        assert (b.search(SearchRequest("tea"))).engine == "builtin"
        qmd.fault = None
        with within(5):
            while b.failover.active != "qmd":
                time.sleep(0.01)
        assert b.failover.state.probe_attempts >= 1
    b.close()


def test_a_second_process_starts_from_the_persisted_state(ws: Path) -> None:
    clock = Clock()
    first_qmd = FakeQmd(ws)
    first = backend(qmd_agent(ws), first_qmd, clock)
    first_qmd.fault = QmdTimeout("hung")
    first.search(SearchRequest("tea"))
    # a new process (a one-off CLI call): same state dir, its own engines
    second_qmd = FakeQmd(ws)
    second = backend(qmd_agent(ws), second_qmd, clock)
    assert second.failover.active == "builtin"
    answer = second.search(SearchRequest("tea"))
    assert answer.engine == "builtin" and "QmdTimeout" in (answer.fallback or {})["reason"]
    assert second_qmd.searches == 0  # it did not pay qmd's timeout again
    first.close()
    second.close()


def test_status_from_another_process_tells_the_truth(ws: Path) -> None:
    qmd = FakeQmd(ws)
    qmd.fault = QmdBadOutput("this is not json {")
    svc = MemoryService(agent_config(ws), qmd_factory=lambda _a: qmd)
    out = svc.memory_search("tea")
    assert out["backend"] == "builtin"
    other = MemoryService(agent_config(ws), qmd_factory=lambda _a: FakeQmd(ws))
    st = other.status()
    assert st["backend"] == "builtin" and "QmdBadOutput" in st["fallback"]["reason"]
    assert st["healthAgeS"] is not None and st["healthAgeS"] < 60
    assert any("qmd is not serving" in i for i in st["issues"])
    # while the built-in index answers, how far qmd's own index lags is not the user's problem
    assert not any("behind" in i for i in st["issues"]), st["issues"]
    svc.close()
    other.close()


def test_status_takes_backend_and_recovery_from_one_reading(ws: Path) -> None:
    """A probe can finish while status() is assembled (it awaits the index and qmd in between):
    the answer pairs the backend with the recovery counters of the same moment, never "qmd"
    with the attempts of the failed-over state before the probe (seen as attempts == 0)."""
    qmd = FakeQmd(ws)
    svc = MemoryService(agent_config(ws), qmd_factory=lambda _a: qmd)
    qmd.fault = QmdBadOutput("garbage")
    assert (svc.memory_search("tea"))["backend"] == "builtin"
    qmd.fault = None
    b = svc.backend()
    # status() asks qmd for its status twice: once before reading the state, once after
    qmd.on_second_status = lambda: b.failover.record_probe_success(b.failover.state.since or 0)
    during = svc.status()
    assert (during["backend"], during["recovery"]["attempts"]) == ("builtin", 0)
    after = svc.status()
    assert (after["backend"], after["recovery"]["attempts"]) == ("qmd", 1)
    svc.close()


def test_fail_closed_raises_instead_of_falling_back(ws: Path) -> None:
    clock, qmd = Clock(), FakeQmd(ws)
    agent = agent_for(
        ws, {"provider": "none"}, memory={"backend": "qmd", "qmd": {"fallback": "none"}}
    )
    b = backend(agent, qmd, clock)
    qmd.fault = QmdTimeout("hung")
    with pytest.raises(ServiceUnavailable, match="fallback = none"):
        b.search(SearchRequest("tea"))
    assert b.index is None
    b.close()


def agent_config(ws: Path) -> Any:
    from memoryd.config import validate_config

    return validate_config(
        {
            "memory": {"backend": "qmd"},
            "agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}},
        }
    )


@pytest.mark.parametrize("setting", ["empty", "builtin"])
def test_an_empty_qmd_answer_is_completed_only_when_configured(ws: Path, setting: str) -> None:
    # memory.qmd.emptyResults: qmd's `search` ANDs every term, so natural questions often match
    # nothing; "builtin" completes them from the built-in index, marking each hit
    agent = agent_for(
        ws, {"provider": "none"}, memory={"backend": "qmd", "qmd": {"emptyResults": setting}}
    )
    qmd = FakeQmd(ws)
    qmd.empty = True
    b = backend(agent, qmd, Clock())
    answer = b.search(SearchRequest("what tea does Alice like"))
    assert answer.engine == "qmd" and answer.fallback is None
    if setting == "empty":
        assert answer.results == []
    else:
        assert answer.results and answer.results[0].path == "MEMORY.md"
        assert all(r.to_dict()["backend"] == "builtin" for r in answer.results)
        assert any("completed by the built-in index" in n for n in answer.notes)
        one_word = b.search(SearchRequest("tea"))
        assert one_word.results == []  # a single word is qmd's own answer
    b.close()
