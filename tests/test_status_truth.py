"""`status` tells the truth from any process, and qmd stays fresh — tried with real processes.

Each case runs the CLI as a user would: one process searches, a *separate* `memoryd status
--json` reports. With a garbage, missing, hanging or killed qmd the status says `builtin` and
why; once the fault is gone and a probe succeeds it says `qmd` again. After `warm`, every surface
(human, `--json`, `--deep`, through `serve`) names the same qmd version and collections; a qmd
whose `--version` does not validate is not serving. A note appended to a qmd agent is found right
away by a one-off search, after `memoryd index`, and under `serve`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cli_support import run_memoryd, spawn_memoryd
from memoryd.paths import socket_path
from memoryd.server import ping
from qmd_support import require_qmd, seed_workspace

pytestmark = pytest.mark.qmd

WRAPPER = """#!/bin/sh
REAL="{real}"
MODE=$(cat "{mode}" 2>/dev/null || echo ok)
case "$MODE" in
  garbage) echo "this is not json {{"; exit 0 ;;
  badversion) if [ "$1" = --version ]; then echo "definitely not a version"; exit 0; fi ;;
  hangall) sleep 60; exit 0 ;;
esac
case "$1" in
  search|vsearch|query)
    case "$MODE" in
      hang) sleep 60; exit 0 ;;
      killed) kill -9 $$ ;;
    esac ;;
esac
exec "$REAL" "$@"
"""


class Setup:
    def __init__(self, tmp_path: Path, **qmd: Any) -> None:
        self.ws = seed_workspace(tmp_path / "ws")
        self.mode = tmp_path / "mode"
        self.mode.write_text("ok")
        self.wrapper = tmp_path / "bin" / "qmd"
        self.wrapper.parent.mkdir()
        self.wrapper.write_text(WRAPPER.format(real=require_qmd(), mode=self.mode))
        self.wrapper.chmod(self.wrapper.stat().st_mode | stat.S_IXUSR)
        update = qmd.pop("update", {"onBoot": False, "interval": 0})
        cooldown_ms = qmd.pop("cooldown_ms", 200)
        lines = [
            "[memory]",
            'backend = "qmd"',
            "[memory.qmd]",
            f'command = "{self.wrapper}"',
            "[memory.qmd.limits]",
            "timeoutMs = 2000",
            "[memory.qmd.failover]",
            f"cooldownMs = {cooldown_ms}",
            "probeMaxIntervalMs = 1000",
            "[memory.qmd.update]",
            *(f"{k} = {json.dumps(v)}" for k, v in update.items()),
            "[agents.defaults]",
            f'workspace = "{self.ws}"',
            "[agents.defaults.memorySearch]",
            'provider = "none"',
        ]
        self.config = tmp_path / "qmd.toml"
        self.config.write_text("\n".join(lines) + "\n")

    def fault(self, mode: str) -> None:
        if mode == "missing":
            self.wrapper.rename(self.wrapper.with_name("qmd.hidden"))
        else:
            self.mode.write_text(mode)

    def heal(self) -> None:
        hidden = self.wrapper.with_name("qmd.hidden")
        if hidden.exists():
            hidden.rename(self.wrapper)
        self.mode.write_text("ok")

    def cli(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        return run_memoryd([*argv, "--config", str(self.config)], env=env, timeout=timeout)

    def json(self, *argv: str) -> dict[str, Any]:
        out = self.cli(*argv, "--json")
        assert out.stdout, out.stderr
        data: dict[str, Any] = json.loads(out.stdout)
        return data


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ("garbage", "QmdBadOutput"),
        ("missing", "QmdUnavailable"),
        ("hang", "QmdTimeout"),
        ("killed", "QmdExitError"),
    ],
)
def test_a_separate_status_reports_the_fallback_and_then_the_recovery(
    tmp_path: Path, fault: str, reason: str
) -> None:
    s = Setup(tmp_path)
    assert s.json("search", "zeppelin")["backend"] == "qmd"
    s.fault(fault)
    answered = s.json("search", "zeppelin")
    assert answered["backend"] == "builtin" and reason in answered["fallback"]["reason"]
    assert answered["results"][0]["path"] == "memory/2026-01-03.md"
    if fault == "garbage":  # the human output says so too (the same code path for every fault)
        human = s.cli("search", "zeppelin")
        assert "answered by the built-in index" in human.stderr

    st = s.json("status")
    assert st["backend"] == "builtin" and reason in st["fallback"]["reason"]
    assert st["healthAgeS"] is not None
    if fault == "garbage":
        assert st["qmdVersion"] is None and "not 'qmd X.Y.Z'" in st["qmd"]["versionError"]
    issues = " | ".join(st["issues"])
    assert "qmd is not serving" in issues
    assert "never updated" not in issues and "missing or not answering" not in issues

    s.heal()
    time.sleep(0.3)  # past the cool-down
    deep = s.json("status", "--deep")
    assert deep["backend"] == "qmd" and deep["fallback"] is None, deep
    after = s.json("status")
    assert after["backend"] == "qmd" and not any("not serving" in i for i in after["issues"])
    assert after["qmdVersion"].startswith("qmd ")


def test_no_false_issues_before_and_after_warm(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    before = s.json("status")
    assert before["backend"] == "qmd" and before["qmdVersion"].startswith("qmd ")
    assert not any("not answering" in i or "never updated" in i for i in before["issues"])
    assert s.cli("warm").returncode == 0
    after = s.json("status")
    assert after["lastUpdateAt"] is not None, after
    assert not any("behind" in i for i in after["issues"]), after["issues"]
    idx = s.json("index")
    assert idx["qmd"]["lastUpdateAt"] is not None
    assert s.json("status")["dirty"] is False


def test_an_appended_note_is_found_by_a_one_off_search_and_after_index(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    assert s.cli("index").returncode == 0
    assert s.cli("append", "Zebra migration finished on Friday.").returncode == 0
    found = s.json("search", "zebra")
    assert found["backend"] == "qmd"
    assert [r["path"] for r in found["results"]][:1] == [f"memory/{today()}.md"], found
    assert not found.get("stale")
    s.cli("append", "Yak shaving postponed.")
    assert s.cli("index").returncode == 0
    assert s.json("search", "yak")["results"], "found after memoryd index"


def test_under_serve_an_appended_note_is_found_within_the_debounce(tmp_path: Path) -> None:
    s = Setup(tmp_path, update={"onBoot": True, "interval": 0, "debounceMs": 500})
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = spawn_memoryd(["serve", "--config", str(s.config)], env=env, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while ping(socket_path()) is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert s.cli("append", "Quagga census counted twelve.").returncode == 0
        deadline = time.monotonic() + 10
        while True:
            got = s.json("search", "quagga")
            if got["results"]:
                break
            assert time.monotonic() < deadline, f"not found under serve: {got}\n{log.read_text()}"
            time.sleep(0.3)
        assert got["backend"] == "qmd"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def today() -> str:
    from datetime import datetime

    return datetime.now().astimezone().date().isoformat()


def test_qmd_state_is_private_too(tmp_path: Path, isolated_env: Path) -> None:
    s = Setup(tmp_path)
    old = os.umask(0o022)
    try:
        assert s.json("search", "zeppelin")["backend"] == "qmd"
    finally:
        os.umask(old)
    home = next(isolated_env.rglob("qmd"))
    checked = 0
    for path in home.rglob("*"):
        if path.is_symlink():
            continue  # the shared models folder is qmd's own cache, outside the state dir
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, (path, oct(mode))
        checked += 1
    assert checked >= 4  # index.yml, index.sqlite, the folders


def serve(s: Setup, tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    log = tmp_path / "serve.log"
    with log.open("w") as err:
        proc = spawn_memoryd(["serve", "--config", str(s.config)], env=env, stderr=err)
    deadline = time.monotonic() + 30
    while ping(socket_path()) is None:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    return proc


COLLECTIONS = ["memory-alt-main", "memory-dir-main", "memory-root-main", "memory-user-main"]


def test_after_warm_every_surface_names_the_qmd_version_and_collections(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    assert s.cli("warm").returncode == 0
    one_off = s.json("status")
    version = one_off["qmdVersion"]
    assert version.startswith("qmd 2.") and one_off["qmd"]["version"] == version, one_off["qmd"]
    assert sorted(c["name"] for c in one_off["qmd"]["collections"]) == COLLECTIONS
    assert one_off["backend"] == "qmd" and one_off["issues"] == [], one_off["issues"]

    human = s.cli("status").stdout
    assert version in human and "version unknown" not in human
    assert all(name in human for name in COLLECTIONS) and "none yet" not in human

    deep = s.json("status", "--deep")
    assert deep["qmd"]["version"] == version and deep["qmdVersion"] == version
    assert sorted(c["name"] for c in deep["qmd"]["collections"]) == COLLECTIONS

    proc = serve(s, tmp_path)
    try:
        served = s.json("status")
        assert served["servedBy"], served
        assert served["qmd"]["version"] == version and served["qmdVersion"] == version
        assert sorted(c["name"] for c in served["qmd"]["collections"]) == COLLECTIONS
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)


def test_a_qmd_whose_version_does_not_validate_is_not_serving(tmp_path: Path) -> None:
    s = Setup(tmp_path, cooldown_ms=60_000)
    s.fault("badversion")
    warm = s.cli("warm")
    assert warm.returncode != 0 and "not 'qmd X.Y.Z'" in warm.stdout + warm.stderr
    for st in (s.json("status"), s.json("status", "--deep")):
        assert st["backend"] == "builtin", st
        assert "not 'qmd X.Y.Z'" in st["fallback"]["reason"]
        assert st["qmdVersion"] is None and st["qmd"]["version"] is None
        assert "not 'qmd X.Y.Z'" in st["qmd"]["versionError"]
        # one issue says it, once
        assert sum("not 'qmd X.Y.Z'" in i for i in st["issues"]) == 1, st["issues"]
    human = s.cli("status").stdout
    assert "failed over" in human and "not 'qmd X.Y.Z'" in human
    # searches meanwhile come from the built-in index, saying why
    answered = s.json("search", "zeppelin")
    assert answered["backend"] == "builtin" and "not 'qmd X.Y.Z'" in answered["fallback"]["reason"]


def test_a_probe_due_later_reads_in_so_many_seconds(tmp_path: Path) -> None:
    s = Setup(tmp_path, cooldown_ms=60_000)
    s.fault("garbage")
    assert s.json("search", "zeppelin")["backend"] == "builtin"
    lines = s.cli("status").stdout.splitlines()
    line = next(line for line in lines if line.startswith("next qmd probe"))
    assert re.fullmatch(r"next qmd probe\s+in \d+s\s*", line), line


def test_the_qmd_search_header_names_the_mode_once(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    header = s.cli("search", "Who owns the zeppelin budget?").stdout.splitlines()[0]
    assert " · qmd backend · search mode · " in header, header
    assert "search search" not in header


def test_a_one_off_search_never_waits_for_a_hanging_start_up(tmp_path: Path) -> None:
    s = Setup(tmp_path)
    s.fault("hangall")  # every qmd call hangs: --version, collection list, query
    started = time.monotonic()
    answered = s.json("search", "zeppelin")
    took = time.monotonic() - started
    assert answered["backend"] == "builtin", answered
    assert "still starting after 2s" in answered["fallback"]["reason"]
    assert answered["results"][0]["path"] == "memory/2026-01-03.md"
    # a whole process, start to exit: nowhere near qmd's 30 s command timeout
    assert took < 10, f"took {took:.1f}s"
