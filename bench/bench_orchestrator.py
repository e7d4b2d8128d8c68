"""Supervisor benchmark against the real qmd: failover latency and supervisor overhead.

Run:  .venv/bin/python bench/bench_orchestrator.py [--qmd PATH] [--runs 15] [--keep]

Prints (and writes bench/out/orchestrator.json):
- failover latency: wall time of the memory_search call that meets a dead or hung qmd, minus the
  configured search timeout for the hang case (target: ≤ 50 ms beyond the timeout);
- supervisor overhead: MemoryService.memory_search vs a raw QmdManager.search on the same corpus,
  interleaved, as a ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from memoryd.config import resolve_agent, validate_config
from memoryd.orchestrator import MemoryService
from memoryd.orchestrator.failover import FailoverState
from memoryd.qmd_adapter import QmdManager

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _scratch import scratch_folder

REPO = Path(__file__).resolve().parents[1]
WRAPPER = """#!/bin/sh
REAL="{real}"
MODE=$(cat "{mode}" 2>/dev/null || echo ok)
case "$1" in
  search|vsearch|query)
    case "$MODE" in
      hang) sleep 60; exit 0 ;;
      die) kill -9 $$ ;;
    esac ;;
esac
exec "$REAL" "$@"
"""


def corpus(ws: Path, n: int = 200) -> None:
    (ws / "memory").mkdir(parents=True)
    for i in range(n):
        (ws / "memory" / f"2026-01-{i % 28 + 1:02d}-{i}.md").write_text(
            f"# note {i}\nMet team {i % 17} about project {i % 23}; decided to ship build {i}.\n"
        )
    (ws / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io.\n")


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    os.environ["MEMORYD_STATE_DIR"] = str(root / "state")
    ws = root / "ws"
    corpus(ws)
    mode = root / "mode"
    mode.write_text("ok")
    wrapper = root / "qmd"
    wrapper.write_text(WRAPPER.format(real=args.qmd, mode=mode))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    timeout_ms = 1000
    cfg = validate_config(
        {
            "memory": {
                "backend": "qmd",
                "qmd": {
                    "command": str(wrapper),
                    "limits": {"timeoutMs": timeout_ms},
                    "update": {"onBoot": False, "interval": 0},
                    "failover": {"cooldownMs": 60_000},
                },
            },
            "agents": {"defaults": {"workspace": str(ws), "memorySearch": {"provider": "none"}}},
        }
    )
    home = root / "home"
    svc = MemoryService(
        cfg, qmd_factory=lambda a: QmdManager(a.qmd_settings(), home=home, shared_models_dir=None)
    )
    raw = QmdManager(
        resolve_agent(cfg).qmd_settings(), command=args.qmd, home=home, shared_models_dir=None
    )
    raw.start()
    queries = [f"project {i} build" for i in range(args.runs)]
    svc.memory_search("warm up")
    b = svc.backend()
    assert b.index is not None
    b.index.sync()

    raw_t, svc_t = [], []
    for q in queries:
        t = time.perf_counter()
        raw.search(q)
        raw_t.append(time.perf_counter() - t)
        t = time.perf_counter()
        out = svc.memory_search(q)
        svc_t.append(time.perf_counter() - t)
        assert out["backend"] == "qmd", out

    results: dict[str, Any] = {
        "raw_adapter_median_ms": round(statistics.median(raw_t) * 1000, 1),
        "service_median_ms": round(statistics.median(svc_t) * 1000, 1),
    }
    results["supervisor_overhead_pct"] = round(
        (statistics.median(svc_t) / statistics.median(raw_t) - 1) * 100, 1
    )

    for fault in ("die", "hang"):
        lat = []
        for _ in range(args.fault_runs):
            b.failover.state = FailoverState()  # back on qmd for the next measured failure
            mode.write_text(fault)
            t = time.perf_counter()
            out = svc.memory_search("project 3 build")
            lat.append(time.perf_counter() - t)
            assert out["backend"] == "builtin" and out["results"], out
            mode.write_text("ok")
        med = statistics.median(lat) * 1000
        key = f"failover_{fault}"
        results[f"{key}_median_ms"] = round(med, 1)
        if fault == "hang":
            results[f"{key}_beyond_timeout_ms"] = round(med - timeout_ms, 1)
    raw.close()
    svc.close()
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--qmd",
        default=os.environ.get("MEMORYD_TEST_QMD") or str(REPO / ".tools" / "qmd" / "bin" / "qmd"),
    )
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--fault-runs", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "orchestrator.json"))
    ap.add_argument(
        "--keep", action="store_true", help="keep the scratch folder (indexes, workspaces)"
    )
    args = ap.parse_args()
    with scratch_folder("memoryd-orch-", args.keep) as root:
        results = run(args, root)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
