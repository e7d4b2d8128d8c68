"""MCP over HTTP: the server's RSS while 10,000 sessions are opened and dropped.

Run:  .venv/bin/python bench/bench_mcp_sessions.py [--sessions 10000] [--keep]

Each row starts its own `memoryd mcp --http` (keyword-only, a five-note workspace) and opens
sessions one after another with the bearer token (`initialize`, then `notifications/initialized`
and one `tools/list`, as a client does). The rows:

* `dropped` — memoryd's defaults; each client ends its session (`DELETE`), as the SDK clients do;
* `abandoned, defaults` — memoryd's defaults (64 sessions, 10 idle minutes); clients vanish
  without ending their session, so after 64 the server answers 503 with `Retry-After` until
  idle ones expire;
* `abandoned, no bounds` — the same clients against a server started with the bounds out of
  reach (`--max-sessions 1000000 --session-idle 86400`), which is how every server ran before
  they existed: every abandoned session stays.

Printed per row: RSS (VmRSS of the server process) after the first 100 sessions (the baseline),
after every 2,000, and at the end; the ratio end / baseline; how many opening requests got 200,
503 or anything else. Only ratios within one run mean anything on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _scratch import scratch_folder

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench_mcp_sessions", "version": "0"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
POST = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def start_server(root: Path, name: str, extra: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    ws = root / "ws"
    if not ws.exists():
        (ws / "memory").mkdir(parents=True)
        (ws / "MEMORY.md").write_text("# Memory\n- Production deploys go to fly.io.\n")
        for day in range(1, 5):
            (ws / "memory" / f"2026-11-0{day}.md").write_text(f"# 2026-11-0{day}\n- note {day}\n")
    cfg = root / "memoryd.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n'
        '[agents.defaults.memorySearch]\nprovider = "none"\n'
    )
    err = root / f"{name}.stderr"
    env = {**os.environ, "MEMORYD_STATE_DIR": str(root / "state")}
    with err.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memoryd", "mcp", "--config", str(cfg), "--http", "0", *extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=fh,
            env=env,
        )
    deadline = time.monotonic() + 60
    while not (found := re.search(r"listening on (http://\S+/mcp)", err.read_text())):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"memoryd mcp did not start: {err.read_text()}")
        time.sleep(0.05)
    return proc, found.group(1)


def run_row(
    root: Path, name: str, sessions: int, extra: list[str], drop: bool
) -> dict[str, object]:
    proc, url = start_server(root, name, extra)
    token = (root / "state" / "mcp-token").read_text().strip()
    auth = {**POST, "Authorization": f"Bearer {token}"}
    statuses: dict[str, int] = {}
    samples: list[tuple[int, float]] = []
    started = time.perf_counter()
    try:
        with httpx.Client(timeout=30) as client:
            for n in range(1, sessions + 1):
                got = client.post(url, headers=auth, content=json.dumps(INITIALIZE))
                key = str(got.status_code)
                statuses[key] = statuses.get(key, 0) + 1
                if got.status_code == 200:
                    sid = got.headers["mcp-session-id"]
                    session = {**auth, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
                    client.post(url, headers=session, content=json.dumps(INITIALIZED))
                    client.post(url, headers=session, content=json.dumps(LIST))
                    if drop:
                        client.delete(url, headers=session)
                if n == 100 or n % 2000 == 0 or n == sessions:
                    samples.append((n, rss_mb(proc.pid)))
        time.sleep(1.0)  # let the server finish tearing down what it was dropping
        samples.append((sessions, rss_mb(proc.pid)))
    finally:
        seconds = time.perf_counter() - started
        asked = time.perf_counter()
        proc.terminate()
        try:
            proc.wait(300)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
        stop = time.perf_counter() - asked
    result: dict[str, object] = {
        "name": name,
        "samples": samples,
        "statuses": statuses,
        "seconds": seconds,
        "stop": stop,
    }
    show(result)
    return result


def show(r: dict[str, object]) -> None:
    samples = r["samples"]
    assert isinstance(samples, list)
    base = samples[0][1]
    trail = "  ".join(f"{n:,}: {mb:.0f}" for n, mb in samples[:-1])
    end = samples[-1][1]
    print(
        f"{r['name']:22} baseline {base:.0f}  end {end:.0f}  ratio {end / base:.2f}x  "
        f"answers {r['statuses']}  {r['seconds']:.0f}s, stopped {r['stop']:.1f}s after SIGTERM"
        f"\n{'':22} {trail}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sessions", type=int, default=10_000)
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = ap.parse_args(argv)
    rows = [
        ("dropped", [], True),
        ("abandoned, defaults", [], False),
        ("abandoned, no bounds", ["--max-sessions", "1000000", "--session-idle", "86400"], False),
    ]
    print(f"{args.sessions:,} sessions per row; RSS of the server in MB", flush=True)
    with scratch_folder("memoryd-bench-sessions-", args.keep) as root:
        for name, extra, drop in rows:
            run_row(root, name, args.sessions, extra, drop)


if __name__ == "__main__":
    main()
