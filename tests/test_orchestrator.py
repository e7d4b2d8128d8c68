"""The supervisor against the real qmd: failover on every fault, recovery, fail-closed, scope denial.

Faults are injected by a wrapper script in front of the real qmd binary; only search calls
(`search`/`vsearch`/`query`) see the fault, so collection bootstrap and updates stay real.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from cli_support import spawn_memoryd
from helpers import background, within
from memoryd.config import resolve_agent, validate_config
from memoryd.orchestrator import MemoryService
from qmd_support import (
    QmdRig,
    require_qmd,
    seed_workspace,
    start_service,
    top_path,
    wait_for_backend,
)

pytestmark = [pytest.mark.qmd]

WRAPPER = """#!/bin/sh
REAL="{real}"
MODE=$(cat "{mode}" 2>/dev/null || echo ok)
case "$1" in
  search|vsearch|query)
    case "$MODE" in
      hang) sleep 60; exit 0 ;;
      garbage) echo "Segmentation fault (core dumped)? not json {{"; exit 0 ;;
      die) "$REAL" "$@" >/dev/null 2>&1 & pid=$!; sleep 0.05; kill -9 $pid; exit 137 ;;
      locked) echo "SqliteError: database is locked" >&2; exit 1 ;;
    esac ;;
esac
exec "$REAL" "$@"
"""


class Rig(QmdRig):
    """A `QmdRig` whose qmd is a fault-injecting wrapper around the real one."""

    def __init__(self, tmp_path: Path, qmd: str, **qmd_cfg: Any) -> None:
        self.mode = tmp_path / "mode"
        self.mode.write_text("ok")
        self.bin_dir = tmp_path / "bin"
        self.bin_dir.mkdir()
        self.wrapper = self.bin_dir / "qmd"
        self.wrapper.write_text(WRAPPER.format(real=qmd, mode=self.mode))
        self.wrapper.chmod(self.wrapper.stat().st_mode | stat.S_IXUSR)
        super().__init__(tmp_path, str(self.wrapper), **qmd_cfg)

    def fault(self, mode: str) -> None:
        self.mode.write_text(mode)


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path, require_qmd())


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        # the real process edges: a hung process group killed by the timeout, garbage on
        # stdout, a locked index reported as such (the state machine itself: test_failover.py)
        ("hang", "QmdTimeout"),
        ("garbage", "QmdBadOutput"),
        ("locked", "QmdLocked"),
    ],
)
def test_failover_answers_the_same_call_and_recovers(
    tmp_path: Path, fault: str, reason: str
) -> None:
    # a hung probe waits out the whole timeout: the first probe is due after the fault is gone
    slow_probe = {
        "failover": {"failureThreshold": 1, "cooldownMs": 1500, "probeMaxIntervalMs": 3000}
    }
    rig = Rig(tmp_path, require_qmd(), **(slow_probe if fault == "hang" else {}))
    svc = rig.service()
    with background() as tg:
        start_service(svc, tg)
        healthy = svc.memory_search("zeppelin budget")
        assert healthy["backend"] == "qmd" and top_path(healthy) == "memory/2026-01-03.md"

        rig.fault(fault)
        failed = svc.memory_search("zeppelin budget")
        assert failed["backend"] == "builtin", failed
        assert top_path(failed) == "memory/2026-01-03.md"
        assert reason in failed["fallback"]["reason"] and failed["fallback"]["from"] == "qmd"
        st = svc.status()
        assert st["backend"] == "builtin" and reason in st["fallback"]["reason"]
        assert st["requestedBackend"] == "qmd"

        # while failed over, searches do not pay qmd's timeout
        with within(1.5):
            again = svc.memory_search("green tea")
        assert again["backend"] == "builtin" and top_path(again) == "MEMORY.md"

        rig.fault("ok")
        st = wait_for_backend(svc, "qmd")
        assert st["recovery"]["attempts"] >= 1
        back = svc.memory_search("zeppelin budget")
        assert back["backend"] == "qmd" and back["fallback"] is None
    svc.close()


HANGING_QMD = "#!/bin/sh\nsleep 60\n"


@pytest.mark.parametrize("under_serve", [False, True], ids=["one-off", "serve"])
def test_a_qmd_that_hangs_at_start_up_is_answered_within_its_timeout(
    tmp_path: Path, under_serve: bool
) -> None:
    hang = tmp_path / "bin" / "qmd"
    hang.parent.mkdir()
    hang.write_text(HANGING_QMD)
    hang.chmod(0o755)
    rig = QmdRig(tmp_path, str(hang), limits={"timeoutMs": 1500})
    svc = rig.service()
    with background() as tg:
        started = time.monotonic()
        if under_serve:
            svc.start(tg)  # qmd's start-up runs in the background: nothing waits on it
        out = svc.memory_search("zeppelin budget")
        took = time.monotonic() - started
        assert out["backend"] == "builtin" and top_path(out) == "memory/2026-01-03.md"
        assert "still starting after 1.5s" in out["fallback"]["reason"], out["fallback"]
        assert took < 1.5 + 1.0, f"answered after {took:.2f}s"
        # failed over: the next search does not wait again
        with within(1.0):
            again = svc.memory_search("green tea")
        assert again["backend"] == "builtin"
        st = svc.status()
        assert st["backend"] == "builtin" and "still starting" in st["fallback"]["reason"]
    svc.close()
    print(f"hanging start-up answered in {took:.2f}s (timeout 1.5 s)")


def test_missing_binary_fails_over_and_recovers_when_restored(rig: Rig) -> None:
    svc = rig.service()
    with background() as tg:
        start_service(svc, tg)
        assert (svc.memory_search("espresso"))["backend"] == "qmd"
        hidden = rig.bin_dir / "qmd.hidden"
        os.rename(rig.wrapper, hidden)
        out = svc.memory_search("espresso")
        assert out["backend"] == "builtin" and top_path(out) == "MEMORY.md"
        assert "QmdUnavailable" in out["fallback"]["reason"]
        os.rename(hidden, rig.wrapper)
        wait_for_backend(svc, "qmd")
        assert (svc.memory_search("espresso"))["backend"] == "qmd"
    svc.close()


def test_qmd_missing_at_start_serves_builtin(tmp_path: Path) -> None:
    rig = Rig(tmp_path, require_qmd())
    os.unlink(rig.wrapper)
    svc = rig.service()
    out = svc.memory_search("green tea")
    assert out["backend"] == "builtin" and top_path(out) == "MEMORY.md"
    assert (
        "QmdUnavailable" in out["fallback"]["reason"]
        or "failed to start" in out["fallback"]["reason"]
    )
    svc.close()


def test_fail_closed_surfaces_unavailable_and_builds_no_index(tmp_path: Path) -> None:
    rig = Rig(tmp_path, require_qmd(), fallback="none")
    svc = rig.service()
    assert (svc.memory_search("green tea"))["backend"] == "qmd"
    rig.fault("garbage")
    out = svc.memory_search("green tea")
    assert out["results"] == [] and out["disabled"] is True
    assert "fallback = none" in out["error"] and "QmdBadOutput" in out["error"]
    assert svc.backend().index is None
    assert not any(p.suffix == ".sqlite" for p in (tmp_path / "_state").rglob("*.sqlite"))
    svc.close()


def test_scope_denial_is_visible_not_a_failover(rig: Rig) -> None:
    svc = rig.service()
    rig.fault("garbage")
    out = svc.memory_search("green tea", session_key="agent:main:discord:group:c1")
    assert out == {"results": [], "scopeDenied": True, "reason": out["reason"]}
    assert "chatType=group" in out["reason"]
    # the denial never touched qmd, so nothing failed over
    assert (svc.status())["backend"] == "qmd"
    svc.close()


def test_status_reports_qmd_details(rig: Rig) -> None:
    svc = rig.service()
    svc.memory_search("green tea")
    st = svc.status()
    assert st["backend"] == "qmd" and st["searchMode"] == "search"
    assert st["qmdVersion"] and "2.8" in st["qmdVersion"]
    assert {c["name"] for c in st["qmd"]["collections"]} >= {"memory-root-main", "memory-dir-main"}
    assert st["builtin"]["vector"]["engine"] in ("sqlite-vec", "numpy")  # the failover index too
    svc.close()


def test_memory_get_through_the_service(rig: Rig) -> None:
    svc = rig.service()
    out = svc.memory_get("MEMORY.md", from_line=3, lines=1)
    assert out == {"path": "MEMORY.md", "text": "Alice likes green tea.\n"}
    bad = svc.memory_get("../etc/passwd.md")
    assert bad["disabled"] is True and "escapes" in bad["error"] and bad["text"] == ""
    svc.close()


def test_builtin_backend_never_starts_qmd(tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}}}
    )
    svc = MemoryService(cfg, qmd_factory=lambda a: pytest.fail("qmd must not be created"))
    out = svc.memory_search("zeppelin")
    assert out["backend"] == "builtin" and top_path(out) == "memory/2026-01-03.md"
    st = svc.status()
    assert st["requestedBackend"] == "builtin" and st["fallback"] is None
    assert resolve_agent(cfg).memory.backend == "builtin"
    svc.close()


def test_qmd_sessions_are_exported_and_searchable_through_the_service(tmp_path: Path) -> None:
    import json

    rig = Rig(tmp_path, require_qmd(), sessions={"enabled": True})
    agent = resolve_agent(rig.config)
    agent.state.sessions_dir.mkdir(parents=True)
    (agent.state.sessions_dir / "s1.jsonl").write_text(
        json.dumps(
            {
                "type": "message",
                "role": "user",
                "content": [
                    {
                        "type": "text",
                        "text": "Book the hovercraft ferry, my key is sk-abcdefghijklmnopqrstuvwx1234",
                    }
                ],
            }
        )
        + "\n"
    )
    svc = rig.service()
    out = svc.memory_search("hovercraft ferry")
    assert out["backend"] == "qmd"
    hit = next(r for r in out["results"] if r["source"] == "sessions")
    assert "hovercraft" in hit["snippet"] and "sk-abcdef" not in hit["snippet"]
    assert any(c["name"] == "sessions-main" for c in (svc.status())["qmd"]["collections"])
    svc.close()


def test_serve_sigterm_leaves_no_qmd_processes(tmp_path: Path) -> None:
    """An update hangs inside qmd when SIGTERM arrives; serve must kill its whole process group."""
    import signal
    import subprocess
    import time

    from memoryd.paths import socket_path
    from memoryd.server import ping

    qmd = require_qmd()
    ws = seed_workspace(tmp_path / "ws")
    marker = "61.4321"  # a sleep length no other process uses
    wrapper = tmp_path / "qmd-slow-update"
    wrapper.write_text(
        f'#!/bin/sh\nif [ "$1" = update ]; then sleep {marker}; fi\nexec "{qmd}" "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[memory]\nbackend = "qmd"\n[memory.qmd]\ncommand = "{wrapper}"\n'
        f"[memory.qmd.update]\nonBoot = true\n"
        f'[agents.defaults]\nworkspace = "{ws}"\n[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    env = {**os.environ, "MEMORYD_CONFIG": str(cfg)}
    with (tmp_path / "serve.log").open("w") as log:
        proc = spawn_memoryd(["serve"], env=env, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            running = subprocess.run(
                ["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True
            )
            if running.stdout.strip() and ping(socket_path()) is not None:
                break
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            assert time.monotonic() < deadline, "the boot update never started"
            time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0, (tmp_path / "serve.log").read_text()
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"orphaned qmd children: {left.stdout}"


def test_warm_prepares_qmd_and_the_builtin_index(rig: Rig) -> None:
    from memoryd.orchestrator.warm import warm

    steps: list[tuple[str, bool, str]] = []
    svc = rig.service()
    assert warm(svc, None, lambda s, ok, d: steps.append((s, ok, d)))
    names = [s for s, ok, _ in steps if ok]
    assert names[:3] == ["qmd home and collections", "qmd version", "qmd update"]
    assert "qmd keyword search" in names and "built-in index" in names
    assert (svc.memory_search("zeppelin"))["backend"] == "qmd"
    svc.close()
