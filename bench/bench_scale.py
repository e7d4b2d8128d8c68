"""Growth of the built-in index at 10k, 50k and 100k chunks, beside qmd 2.8.3's `search`, in one run.

Run:  .venv/bin/python bench/bench_scale.py [--sizes 10000 50000 100000] [--queries 100]
          [--cold-runs 40] [--qmd PATH | --no-qmd] [--plot docs/img/scale.png | --no-plot] [--json]
      .venv/bin/python bench/bench_scale.py --from-json bench/out/scale.json   (table and plot again)

The default run takes ~15 minutes on 2 loaded cores (it prints its total). Per size it writes a
workspace of synthetic notes (Zipf-distributed pseudo-words and real topic phrases, ~400-token
chunks, as bench_builtin_index.py; the number of notes is set so that the chunker gives about
the size asked for) and measures, every size in the same run:

* memoryd, long-lived: a separate worker process (`--worker`) holds a MemoryIndex, as `serve`
  does, syncs the workspace with a fast stand-in embedder (a 384-d unit vector seeded by each
  text's hash: storage, KNN and fusion cost what they cost with real vectors), then answers the
  queries keyword-only and hybrid in turns. Latencies are taken inside the worker, with the
  worker's CPU time beside them (on a loaded machine a niced worker waits for a core
  mid-search, which the wall clock counts and CPU time does not). The query vector is the
  stand-in's (~0.05 ms), so query embedding is EXCLUDED from every hybrid figure: a real
  model adds the same few ms at every size (bench_embeddings.py). KNN runs on whichever
  engine the default settings pick at that size (reported), with one BLAS thread, as the local
  provider sets. The worker's RSS (and peak) after the sync and after the searches is read
  from /proc.
* DB size on disk (the index file with its -wal/-shm) and bytes per chunk; sync time split into
  the text phase and the vector phase.
* No vectors on either side: `memoryd index` with `provider = "none"` (the index the one-off
  and MCP rows below search) against qmd 2.8.3 in an isolated XDG home, `qmd collection add`
  (which indexes) and a `qmd update`; both DB sizes (`qmd search` needs no `qmd embed`).
* One-off CLI against one-off CLI, interleaved: `memoryd search --json` (keyword only) and
  `qmd search --json -n 6`, each a new process as a user runs it (memoryd byte-compiled first,
  as an install is).
* Long-lived against long-lived, over MCP stdio, interleaved: `memoryd mcp` (keyword only) and
  `qmd mcp` (its `query` tool with one `lex` sub-query and `rerank: false`: qmd's BM25 search
  in a long-lived process, the only one it offers offline; it also chunks its candidates to
  pick snippets, which `qmd search` does not). Round trips timed by this process; each server's
  RSS after the searches.

The figures that count are ratios within the run: the largest size over the smallest for
memoryd's keyword and hybrid p50, and memoryd over qmd at each size. Progress goes to stderr;
the table (or JSON with `--json`) to stdout; JSON also to bench/out/scale.json, and the curves
to a PNG (needs matplotlib: `pip install -e '.[bench]'`; without it the plot is skipped). A
missing or failing qmd skips the peer with a note; the run goes on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_builtin_index import TOPICS, WORDS, make_sentences, pct

from memoryd.embeddings.base import EmbeddingProvider, Matrix, Vector

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_QMD = ROOT / ".tools" / "qmd" / "bin" / "qmd"
DIMS = 384
LINES_PER_FILE = 240  # ~35 tokens a line: ~25 chunks of ~400 tokens a note
RESULTS = 6  # the retrieval contract's result count, asked of both engines
STARTED = time.perf_counter()


def progress(msg: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f} s] {msg}", file=sys.stderr, flush=True)


class SeededVectors(EmbeddingProvider):
    """A unit vector per text, seeded by its hash: free to compute, realistic to store and search."""

    def __init__(self) -> None:
        self.id = "seeded"
        self.model = "seeded-384"
        self.dims = DIMS

    @staticmethod
    def _one(text: str) -> Vector:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        v = np.random.default_rng(seed).standard_normal(DIMS).astype(np.float32)
        out: Vector = v / np.linalg.norm(v)
        return out

    def embed_query(self, text: str) -> Vector:
        return self._one(text)

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        return np.stack([self._one(t) for t in texts])


# ---------------------------------------------------------------- measuring helpers


def proc_mb(pid: int | str = "self") -> dict[str, float]:
    """RSS and its peak (VmHWM) of a process, in MB."""
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(value.split()[0]) / 1024, 1)
    return {"rss_mb": out.get("VmRSS", 0.0), "peak_mb": out.get("VmHWM", 0.0)}


def tree_mb(pid: int) -> float:
    """RSS of a process and its children (qmd's launcher or a wrapper may sit in between)."""
    total = 0.0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            total += proc_mb(p)["rss_mb"]
            with open(f"/proc/{p}/task/{p}/children") as fh:
                pids += [int(c) for c in fh.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return round(total, 1)


def files_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


def summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(ms), 2), "p95_ms": round(pct(ms, 95), 2)}


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else round(a / b, 2)


# ---------------------------------------------------------------- the corpus


def chunks_per_note(sentences: list[str]) -> float:
    """How many chunks the default chunker makes of one note as build_notes writes it."""
    from memoryd.core.chunking import chunk_lines

    rng = random.Random(0)
    counts = [
        len(chunk_lines("\n".join(rng.choice(sentences) for _ in range(LINES_PER_FILE))))
        for _ in range(5)
    ]
    return statistics.mean(counts)


def build_notes(ws: Path, sentences: list[str], target_chunks: int, per_note: float) -> int:
    rng = random.Random(target_chunks)
    (ws / "memory").mkdir(parents=True)
    notes = max(1, round(target_chunks / per_note))
    for f in range(notes):
        day = f"2024-{(f // 28) % 12 + 1:02d}-{f % 28 + 1:02d}"
        name = f"{day}-{f}.md" if f % 3 else f"topic-{f}.md"
        lines = [f"# notes {f}"] + [rng.choice(sentences) for _ in range(LINES_PER_FILE)]
        (ws / "memory" / name).write_text("\n".join(lines) + "\n")
    (ws / "MEMORY.md").write_text("# Memory\n" + "\n".join(rng.sample(sentences, 20)) + "\n")
    return notes + 1


# ---------------------------------------------------------------- the memoryd worker


def worker() -> None:
    """The long-lived memoryd process: one JSON request per stdin line, one answer per line."""
    from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

    from memoryd.builtin_index import MemoryIndex
    from memoryd.config import resolve_agent, validate_config
    from memoryd.embeddings.base import ProviderSelection

    # one BLAS thread, as the default (local) provider sets when it loads: the stand-in
    # embedder loads no model, and two BLAS threads on two busy cores made the KNN ~10x slower
    threadpool_limits(limits=1, user_api="blas")

    def engine() -> Any:
        return idx.status().to_dict().get("vector", {}).get("searchEngine")

    idx: Any = None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["op"] == "sync":
                cfg = validate_config(
                    {
                        "agents": {
                            "defaults": {
                                "workspace": req["workspace"],
                                "memorySearch": {"store": {"path": req["db"]}},
                            }
                        }
                    }
                )
                agent = resolve_agent(cfg)
                idx = MemoryIndex(
                    agent.index_settings(), ProviderSelection("seeded", SeededVectors(), "bench")
                )
                t = time.perf_counter()
                idx.sync(embed=False)
                text_s = time.perf_counter() - t
                t = time.perf_counter()
                idx.sync()
                vector_s = time.perf_counter() - t
                st = idx.status().to_dict()
                answer: dict[str, Any] = {
                    "chunks": st["chunks"],
                    "files": st["files"],
                    "vector_engine": engine(),
                    "text_s": text_s,
                    "vector_s": vector_s,
                    **proc_mb(),
                }
            elif req["op"] == "search":
                t, cpu = time.perf_counter(), time.process_time()
                out = idx.search(req["q"], mode=req["mode"], max_results=RESULTS)
                answer = {
                    "ms": (time.perf_counter() - t) * 1000,
                    "cpu_ms": (time.process_time() - cpu) * 1000,
                    "hits": len(out.results),
                }
            elif req["op"] == "rss":
                answer = {**proc_mb(), "vector_engine": engine()}
            else:
                raise ValueError(f"unknown op {req['op']!r}")
        except Exception as exc:  # the parent reports it as one line
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)
    if idx is not None:
        idx.close()


class Worker:
    def __init__(self, state: Path) -> None:
        env = {**os.environ, "MEMORYD_STATE_DIR": str(state)}
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    def ask(self, **req: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"bench_scale: the memoryd worker died (exit {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise SystemExit(f"bench_scale: the memoryd worker failed: {answer['error']}")
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# ---------------------------------------------------------------- MCP over stdio


class PeerError(Exception):
    """qmd (or its MCP server) failed: the run goes on without the peer, and says so."""


class StdioMcp:
    """A minimal MCP client over a server's stdin/stdout (one JSON-RPC message per line)."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._id = 0
        self._call(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench_scale", "version": "1"},
            },
            timeout=120,
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()

    def _call(self, method: str, params: dict[str, Any], timeout: float = 120) -> Any:
        self._id += 1
        self._send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise PeerError(f"{self.name} gave no answer in {timeout:.0f} s") from None
            if line is None:
                raise PeerError(f"{self.name} exited ({self.proc.wait()})")
            try:
                msg = json.loads(line)
            except json.JSONDecodeError:
                continue  # a stray line on stdout is not an answer
            if isinstance(msg, dict) and msg.get("id") == self._id:
                if "error" in msg:
                    raise PeerError(f"{self.name}: {msg['error']}")
                return msg["result"]

    def tool(self, name: str, args: dict[str, Any]) -> tuple[float, Any]:
        t = time.perf_counter()
        result = self._call("tools/call", {"name": name, "arguments": args})
        ms = (time.perf_counter() - t) * 1000
        if result.get("isError"):
            text = " ".join(c.get("text", "") for c in result.get("content", []))
            raise PeerError(f"{self.name} {name} failed: {text[:300]}")
        return ms, result

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def mcp_search(server: StdioMcp, q: str) -> tuple[float, int]:
    """One search through a server's own tool: round-trip ms and how many results came back."""
    if server.name == "qmd mcp":
        ms, res = server.tool(
            "query", {"searches": [{"type": "lex", "query": q}], "limit": RESULTS, "rerank": False}
        )
        return ms, qmd_hits(res)
    ms, res = server.tool("memory_search", {"query": q, "maxResults": RESULTS})
    return ms, memoryd_hits(res)


def peer_failed(out: dict[str, Any], n: int, stage: str, err: Exception) -> None:
    """A loud note, the error kept in the figures, and no more qmd at this size."""
    bar = "!" * 72
    print(f"{bar}\nbench_scale: qmd failed at {n:,} ({stage}): {err}\n{bar}", file=sys.stderr)
    out.setdefault("qmd_errors", []).append(f"{stage}: {err}")


def memoryd_hits(result: Any) -> int:
    data = result.get("structuredContent")
    if data is None:
        data = json.loads(result["content"][0]["text"])
    if data.get("disabled") or data.get("error"):
        raise SystemExit(f"bench_scale: memoryd mcp memory_search: {data.get('error')}")
    return len(data.get("results", []))


def qmd_hits(result: Any) -> int:
    return len((result.get("structuredContent") or {}).get("results", []))


# ---------------------------------------------------------------- qmd


class Qmd:
    """qmd 2.8.3 in an isolated home: its own config and cache dirs, run from a neutral cwd."""

    def __init__(self, launcher: Path, home: Path) -> None:
        self.launcher = launcher
        self.cwd = home / "cwd"
        self.cwd.mkdir(parents=True)
        self.env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(home / "config"),
            "QMD_CONFIG_DIR": str(home / "config" / "qmd"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "NO_COLOR": "1",
        }
        self.db = home / "cache" / "qmd" / "index.sqlite"

    def run(self, *args: str, timeout: float = 3600) -> tuple[float, str]:
        t = time.perf_counter()
        try:
            proc = subprocess.run(
                [str(self.launcher), *args],
                capture_output=True,
                text=True,
                env=self.env,
                cwd=self.cwd,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            raise PeerError(f"qmd {args[0]} gave no answer in {timeout:.0f} s") from None
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            raise PeerError(
                f"qmd {args[0]} failed ({proc.returncode}): {proc.stderr.strip()[-300:]}"
            )
        return wall, proc.stdout

    def mcp_command(self) -> list[str]:
        """node and qmd.js themselves, as the launcher execs them (so the RSS read is qmd's)."""
        text = self.launcher.read_text() if self.launcher.stat().st_size < 4096 else ""
        for line in text.splitlines():
            if line.startswith("exec "):
                parts = [p.strip('"') for p in line.split()[1:] if p != '"$@"']
                if len(parts) == 2 and all(Path(p).exists() for p in parts):
                    return [*parts, "mcp"]
        return [str(self.launcher), "mcp"]


def qmd_available(path: str | None) -> tuple[Path | None, str]:
    if path is None:
        return None, "--no-qmd"
    launcher = Path(path)
    if not launcher.exists():
        return None, f"{launcher} not found (scripts/install-qmd installs qmd 2.8.3)"
    try:
        version = subprocess.run(
            [str(launcher), "--version"], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{launcher} does not run: {exc}"
    if version.returncode != 0:
        return None, f"{launcher} --version failed ({version.returncode})"
    return launcher, (version.stdout or version.stderr).strip()


# ---------------------------------------------------------------- one size


def memoryd_config(root: Path, ws: Path, db: Path) -> Path:
    cfg = root / "keyword.toml"
    cfg.write_text(
        f'[agents.defaults]\nworkspace = "{ws}"\n'
        '[agents.defaults.memorySearch]\nprovider = "none"\n'
        f'[agents.defaults.memorySearch.store]\npath = "{db}"\n'
    )
    return cfg


def one_size(
    n: int,
    root: Path,
    sentences: list[str],
    per_note: float,
    queries: list[str],
    args: argparse.Namespace,
    qmd_launcher: Path | None,
) -> dict[str, Any]:
    base = root / f"size-{n}"
    ws, db, state = base / "ws", base / "index.sqlite", base / "state"
    state.mkdir(parents=True)
    out: dict[str, Any] = {"target_chunks": n}
    progress(f"{n:,}: writing the notes")
    out["notes"] = build_notes(ws, sentences, n, per_note)
    out["notes_mb"] = round(sum(p.stat().st_size for p in ws.rglob("*.md")) / 2**20, 1)

    # memoryd: the long-lived worker syncs, then answers keyword and hybrid in turns
    progress(f"{n:,}: memoryd sync ({out['notes']:,} notes, text then vectors)")
    w = Worker(state)
    try:
        st = w.ask(op="sync", workspace=str(ws), db=str(db))
        chunks = int(st["chunks"])
        dbb = files_bytes(db)
        out["memoryd"] = m = {
            "chunks": chunks,
            "files": st["files"],
            "sync_s": round(st["text_s"] + st["vector_s"], 1),
            "sync_text_phase_s": round(st["text_s"], 1),
            "sync_vector_phase_s": round(st["vector_s"], 1),
            "db_mb": round(dbb / 2**20, 1),
            "db_bytes_per_chunk": round(dbb / max(chunks, 1)),
            "vector_engine": st["vector_engine"],
            "worker_rss_mb_after_sync": st["rss_mb"],
            "worker_peak_mb_after_sync": st["peak_mb"],
        }
        progress(
            f"{n:,}: memoryd synced {chunks:,} chunks in {m['sync_s']} s, "
            f"{m['db_mb']} MB ({m['db_bytes_per_chunk']:,} B/chunk)"
        )
        progress(f"{n:,}: memoryd long-lived searches ({len(queries)} queries x 2 modes)")
        for q in queries[:10]:  # warm: pages the index in, loads what the engines hold
            w.ask(op="search", q=q, mode="keyword")
            w.ask(op="search", q=q, mode="hybrid")
        lat: dict[str, list[float]] = {"keyword": [], "hybrid": []}
        cpu: dict[str, list[float]] = {"keyword": [], "hybrid": []}
        hits: dict[str, list[int]] = {"keyword": [], "hybrid": []}
        for i, q in enumerate(queries):
            for mode in ("keyword", "hybrid") if i % 2 == 0 else ("hybrid", "keyword"):
                a = w.ask(op="search", q=q, mode=mode)
                lat[mode].append(a["ms"])
                cpu[mode].append(a["cpu_ms"])
                hits[mode].append(a["hits"])
        for mode in ("keyword", "hybrid"):
            s = summary(lat[mode])
            m[f"{mode}_p50_ms"], m[f"{mode}_p95_ms"] = s["p50_ms"], s["p95_ms"]
            m[f"{mode}_cpu_p50_ms"] = round(statistics.median(cpu[mode]), 2)
            m[f"{mode}_mean_hits"] = round(statistics.mean(hits[mode]), 2)
        after = w.ask(op="rss")
        m["worker_rss_mb_after_searches"] = after["rss_mb"]
        m["worker_peak_mb"] = after["peak_mb"]
        m["vector_engine"] = after["vector_engine"]
    finally:
        w.close()
    progress(
        f"{n:,}: memoryd keyword p50 {m['keyword_p50_ms']} ms, hybrid p50 {m['hybrid_p50_ms']} ms "
        f"({m['vector_engine']}), worker RSS {m['worker_rss_mb_after_searches']} MB"
    )

    for f in db.parent.glob(db.name + "*"):
        f.unlink()  # the keyword-only processes below need an index of their own (next)

    # the one-off CLI and `memoryd mcp` run keyword-only (`provider = "none"`); on the index
    # synced with the stand-in they would find it due for a rebuild (another provider), so
    # they get one built by `memoryd index`, as a keyword-only user's would be: like qmd's, no
    # vectors, so its time and size compare with qmd's directly
    kw_db = base / "keyword.sqlite"
    cfg = memoryd_config(base, ws, kw_db)
    env = {**os.environ, "MEMORYD_STATE_DIR": str(state)}
    env.pop("MEMORYD_CONFIG", None)
    script = Path(sys.executable).with_name("memoryd")
    memoryd_cmd = [str(script)] if script.exists() else [sys.executable, "-m", "memoryd"]
    progress(f"{n:,}: memoryd index, keyword-only (provider none)")
    t = time.perf_counter()
    proc = subprocess.run(
        [*memoryd_cmd, "index", "--json", "--config", str(cfg)],
        capture_output=True,
        text=True,
        env=env,
        cwd=base,
    )
    kw_s = time.perf_counter() - t
    if proc.returncode != 0:
        raise SystemExit(
            f"bench_scale: memoryd index failed ({proc.returncode}): {proc.stderr.strip()[-300:]}"
        )
    kwb = files_bytes(kw_db)
    m["keyword_only_index_s"] = round(kw_s, 1)
    m["keyword_only_db_mb"] = round(kwb / 2**20, 1)
    m["keyword_only_db_bytes_per_chunk"] = round(kwb / max(chunks, 1))
    progress(f"{n:,}: memoryd keyword-only index in {kw_s:.1f} s, {kwb / 2**20:.1f} MB")

    qmd: Qmd | None = None
    if qmd_launcher is not None:
        qmd = Qmd(qmd_launcher, base / "qmd")
        progress(f"{n:,}: qmd collection add (indexes the notes)")
        try:
            add_s, _ = qmd.run("collection", "add", str(ws), "--name", "notes", "--mask", "**/*.md")
            update_s, _ = qmd.run("update")
        except PeerError as err:
            peer_failed(out, n, "indexing", err)
            qmd = None
        else:
            qb = files_bytes(qmd.db)
            out["qmd"] = {
                "index_s": round(add_s, 1),
                "update_s": round(update_s, 1),
                "db_mb": round(qb / 2**20, 1),
                "db_bytes_per_memoryd_chunk": round(qb / max(chunks, 1)),
            }
            progress(
                f"{n:,}: qmd indexed in {add_s:.1f} s (update {update_s:.1f} s), {qb / 2**20:.1f} MB"
            )

    # long-lived against long-lived: both MCP servers over stdio, the same queries in turns
    progress(f"{n:,}: long-lived over MCP stdio, memoryd mcp" + (" and qmd mcp" if qmd else ""))
    servers: list[StdioMcp] = []
    try:
        try:
            servers.append(
                StdioMcp("memoryd mcp", [*memoryd_cmd, "mcp", "--config", str(cfg)], env, base)
            )
        except PeerError as err:
            raise SystemExit(f"bench_scale: {err}") from None
        if qmd is not None:
            try:
                servers.append(StdioMcp("qmd mcp", qmd.mcp_command(), qmd.env, qmd.cwd))
            except PeerError as err:
                peer_failed(out, n, "mcp", err)
        mcp_lat: dict[str, list[float]] = {srv.name: [] for srv in servers}
        mcp_hits: dict[str, list[int]] = {srv.name: [] for srv in servers}
        for i, q in enumerate([*queries[:10], *queries]):  # the first 10 warm up
            for srv in list(servers if i % 2 == 0 else servers[::-1]):
                try:
                    ms, h = mcp_search(srv, q)
                except PeerError as err:
                    if srv.name != "qmd mcp":
                        raise SystemExit(f"bench_scale: {err}") from None
                    peer_failed(out, n, "mcp", err)
                    servers.remove(srv)
                    srv.close()
                    continue
                if i >= 10:
                    mcp_lat[srv.name].append(ms)
                    mcp_hits[srv.name].append(h)
        for srv in servers:
            key = "memoryd" if srv.name == "memoryd mcp" else "qmd"
            sm = summary(mcp_lat[srv.name])
            out[key]["mcp_p50_ms"], out[key]["mcp_p95_ms"] = sm["p50_ms"], sm["p95_ms"]
            out[key]["mcp_mean_hits"] = round(statistics.mean(mcp_hits[srv.name]), 2)
            out[key]["mcp_rss_mb_after_searches"] = tree_mb(srv.proc.pid)
    finally:
        for srv in servers:
            srv.close()

    # one-off against one-off: a new process per search, as a user types it
    progress(f"{n:,}: one-off CLI searches ({args.cold_runs} each, interleaved)")
    cold: dict[str, list[float]] = {"memoryd": [], "qmd": []}
    cold_hits: dict[str, list[int]] = {"memoryd": [], "qmd": []}
    for i in range(args.cold_runs):
        q = queries[i % len(queries)]
        order = ["memoryd", "qmd"] if qmd is not None and "qmd" in out else ["memoryd"]
        for who in order if i % 2 == 0 else order[::-1]:
            if who == "qmd":
                assert qmd is not None
                try:
                    wall, stdout = qmd.run("search", q, "--json", "-n", str(RESULTS), timeout=300)
                    cold_hits["qmd"].append(len(json.loads(stdout)))
                except (PeerError, json.JSONDecodeError) as err:
                    peer_failed(out, n, "cli", err)
                    qmd = None
                    cold["qmd"].clear()
                    continue
            else:
                t = time.perf_counter()
                proc = subprocess.run(
                    [*memoryd_cmd, "search", q, "--json", "--config", str(cfg)],
                    capture_output=True,
                    text=True,
                    env=env,
                    cwd=base,
                    timeout=300,
                )
                wall = time.perf_counter() - t
                if proc.returncode != 0:
                    raise SystemExit(
                        f"bench_scale: memoryd search failed ({proc.returncode}): "
                        f"{proc.stderr.strip()[-300:]}"
                    )
                cold_hits["memoryd"].append(len(json.loads(proc.stdout)["results"]))
            cold[who].append(wall * 1000)
    for who, walls in cold.items():
        if walls:
            sm = summary(walls)
            out[who]["cli_p50_ms"], out[who]["cli_p95_ms"] = sm["p50_ms"], sm["p95_ms"]
            out[who]["cli_mean_hits"] = round(statistics.mean(cold_hits[who]), 2)
    if "qmd" in out:
        q_ = out["qmd"]
        out["memoryd_over_qmd"] = {
            "cli_p50": ratio(m["cli_p50_ms"], q_.get("cli_p50_ms")),
            "mcp_p50": ratio(m.get("mcp_p50_ms"), q_.get("mcp_p50_ms")),
            "long_lived_keyword_over_qmd_mcp_p50": ratio(m["keyword_p50_ms"], q_.get("mcp_p50_ms")),
            "keyword_only_index_time": ratio(m["keyword_only_index_s"], q_["index_s"]),
            "keyword_only_db_size": ratio(m["keyword_only_db_mb"], q_["db_mb"]),
        }
    if not args.keep:  # --keep leaves every size's notes and indexes for a look afterwards
        progress(f"{n:,}: done; removing its files")
        shutil.rmtree(base, ignore_errors=True)
    return out


# ---------------------------------------------------------------- report


def growth(results: dict[str, Any], sizes: list[int]) -> dict[str, Any]:
    lo, hi = results[str(min(sizes))]["memoryd"], results[str(max(sizes))]["memoryd"]
    return {
        "from_chunks": lo["chunks"],
        "to_chunks": hi["chunks"],
        "chunks": round(hi["chunks"] / lo["chunks"], 2),
        "keyword_p50": ratio(hi["keyword_p50_ms"], lo["keyword_p50_ms"]),
        "hybrid_p50": ratio(hi["hybrid_p50_ms"], lo["hybrid_p50_ms"]),
        "keyword_cpu_p50": ratio(hi.get("keyword_cpu_p50_ms"), lo.get("keyword_cpu_p50_ms")),
        "hybrid_cpu_p50": ratio(hi.get("hybrid_cpu_p50_ms"), lo.get("hybrid_cpu_p50_ms")),
        "cli_p50": ratio(hi["cli_p50_ms"], lo["cli_p50_ms"]),
    }


def table(results: dict[str, Any], sizes: list[int]) -> str:
    def cell(d: dict[str, Any], key: str, fmt: str = "{}") -> str:
        v = d.get(key)
        return "—" if v is None else fmt.format(v)

    rows = [
        ("chunks (memoryd)", lambda m, q: f"{m['chunks']:,}"),
        ("memoryd DB MB, with vectors", lambda m, q: f"{m['db_mb']:,}"),
        ("memoryd DB bytes per chunk, with vectors", lambda m, q: f"{m['db_bytes_per_chunk']:,}"),
        (
            "memoryd sync s, with vectors (text + vectors)",
            lambda m, q: f"{m['sync_s']} ({m['sync_text_phase_s']} + {m['sync_vector_phase_s']})",
        ),
        (
            "no vectors: DB MB, memoryd / qmd",
            lambda m, q: f"{m['keyword_only_db_mb']:,} / {cell(q, 'db_mb', '{:,}')}",
        ),
        (
            "no vectors: index s, `memoryd index` / `qmd collection add`",
            lambda m, q: f"{m['keyword_only_index_s']} / {cell(q, 'index_s')}",
        ),
        (
            "long-lived keyword p50 / p95 ms",
            lambda m, q: f"{m['keyword_p50_ms']} / {m['keyword_p95_ms']}",
        ),
        (
            "long-lived hybrid p50 / p95 ms (KNN engine)",
            lambda m, q: f"{m['hybrid_p50_ms']} / {m['hybrid_p95_ms']} ({m['vector_engine']})",
        ),
        (
            "long-lived CPU p50 ms: keyword / hybrid",
            lambda m, q: f"{cell(m, 'keyword_cpu_p50_ms')} / {cell(m, 'hybrid_cpu_p50_ms')}",
        ),
        (
            "worker RSS MB after sync / after searches (peak)",
            lambda m, q: (
                f"{m['worker_rss_mb_after_sync']} / {m['worker_rss_mb_after_searches']} "
                f"({m['worker_peak_mb']})"
            ),
        ),
        (
            "MCP stdio p50 ms: memoryd / qmd",
            lambda m, q: f"{cell(m, 'mcp_p50_ms')} / {cell(q, 'mcp_p50_ms')}",
        ),
        (
            "MCP server RSS MB after searches: memoryd / qmd",
            lambda m, q: (
                f"{cell(m, 'mcp_rss_mb_after_searches')} / {cell(q, 'mcp_rss_mb_after_searches')}"
            ),
        ),
        (
            "one-off CLI p50 / p95 ms: memoryd",
            lambda m, q: f"{m['cli_p50_ms']} / {m['cli_p95_ms']}",
        ),
        (
            "one-off CLI p50 / p95 ms: qmd search",
            lambda m, q: f"{cell(q, 'cli_p50_ms')} / {cell(q, 'cli_p95_ms')}",
        ),
        (
            "mean hits (of 6): memoryd CLI / qmd CLI",
            lambda m, q: f"{m['cli_mean_hits']} / {cell(q, 'cli_mean_hits')}",
        ),
    ]
    head = "| measure | " + " | ".join(f"{n:,}" for n in sizes) + " |"
    lines = [head, "|---" * (len(sizes) + 1) + "|"]
    for label, fn in rows:
        cells = [fn(results[str(n)]["memoryd"], results[str(n)].get("qmd", {})) for n in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for label, key in (
        ("memoryd / qmd, one-off CLI p50", "cli_p50"),
        ("memoryd / qmd, MCP stdio p50", "mcp_p50"),
    ):
        cells = [str(results[str(n)].get("memoryd_over_qmd", {}).get(key, "—")) for n in sizes]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(results: dict[str, Any], sizes: list[int], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install -e '.[bench]'): no plot"
    rows = [results[str(n)] for n in sizes]
    x = [r["memoryd"]["chunks"] for r in rows]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 5.4))
    series = [
        ("memoryd keyword, in-process", [r["memoryd"]["keyword_p50_ms"] for r in rows], "o-", "C0"),
        ("memoryd hybrid, in-process", [r["memoryd"]["hybrid_p50_ms"] for r in rows], "s-", "C2"),
        (
            "memoryd mcp (keyword), stdio",
            [r["memoryd"].get("mcp_p50_ms") for r in rows],
            "o--",
            "C0",
        ),
        (
            "memoryd search CLI (keyword)",
            [r["memoryd"].get("cli_p50_ms") for r in rows],
            "o:",
            "C0",
        ),
    ]
    if all("qmd" in r for r in rows):
        series += [
            ("qmd mcp (lex), stdio", [r["qmd"].get("mcp_p50_ms") for r in rows], "^--", "C3"),
            ("qmd search CLI", [r["qmd"].get("cli_p50_ms") for r in rows], "^:", "C3"),
        ]
    for label, ys, style, color in series:
        if all(y is not None for y in ys):
            ax1.plot(x, ys, style, color=color, label=label)
    ax1.set_yscale("log")
    ax1.set_xlabel("chunks")
    ax1.set_ylabel("search p50, ms (log)")
    ax1.set_title("Search p50 as the index grows")
    ax1.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax1.grid(True, which="both", alpha=0.3)
    ax2.plot(
        x, [r["memoryd"]["db_bytes_per_chunk"] for r in rows], "o-", color="C0", label="memoryd"
    )
    ax2.plot(
        x,
        [r["memoryd"]["keyword_only_db_bytes_per_chunk"] for r in rows],
        "o--",
        color="C0",
        label="memoryd, no vectors",
    )
    if all("qmd" in r for r in rows):
        ax2.plot(
            x,
            [r["qmd"]["db_bytes_per_memoryd_chunk"] for r in rows],
            "^--",
            color="C3",
            label="qmd, no vectors",
        )
    ax2.axhline(6144, color="grey", linestyle=":", label="6 KB target")
    ax2.set_xlabel("chunks")
    ax2.set_ylabel("DB bytes per chunk")
    ax2.set_ylim(bottom=0)
    ax2.set_title("Index size per chunk")
    ax2.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 100_000])
    ap.add_argument("--queries", type=int, default=100, help="long-lived searches per mode")
    # 40: the p50 of ~100 ms processes moves by about 10 % between runs of 15
    ap.add_argument("--cold-runs", type=int, default=40, help="one-off CLI searches per engine")
    ap.add_argument("--qmd", default=str(DEFAULT_QMD), help="qmd 2.8.3's launcher")
    ap.add_argument("--no-qmd", action="store_true", help="skip the qmd peer")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "scale.json"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "img" / "scale.png"))
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--json", action="store_true", help="print JSON only on stdout")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--from-json", metavar="PATH", help="print and plot a run's JSON again")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker()
        return
    if args.from_json:
        try:
            results = json.loads(Path(args.from_json).read_text())
        except (OSError, ValueError) as err:
            raise SystemExit(f"bench_scale: cannot read {args.from_json}: {err}") from None
        report(results, args, qmd_missing=None)
        return
    if any(n < 100 for n in args.sizes) or args.queries < 10 or args.cold_runs < 1:
        raise SystemExit("bench_scale: sizes must be >= 100, --queries >= 10, --cold-runs >= 1")
    sizes = sorted(set(args.sizes))
    # bytecode for the code under test, as an install has it: with PYTHONDONTWRITEBYTECODE set
    # (some sandboxes set it) every one-off `memoryd search` would compile its modules again
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(ROOT / "src" / "memoryd")], check=True
    )
    qmd_launcher, qmd_note = qmd_available(None if args.no_qmd else args.qmd)
    if qmd_launcher is None:
        bar = "!" * 72
        print(f"{bar}\nbench_scale: NO qmd PEER in this run: {qmd_note}\n{bar}", file=sys.stderr)
    else:
        progress(f"qmd peer: {qmd_launcher} ({qmd_note})")
    rng = random.Random(7)
    sentences = make_sentences(rng, 4000)
    combos = [f"{t} {w}" for t in TOPICS for w in WORDS]
    queries = rng.sample(combos, min(args.queries, len(combos)))  # unique: no cache helps
    per_note = chunks_per_note(sentences)
    results: dict[str, Any] = {
        "sizes": sizes,
        "queries": len(queries),
        "cold_runs": args.cold_runs,
        "qmd": qmd_note,
        "query_embedding": "excluded (seeded stand-in vector)",
    }
    root = Path(tempfile.mkdtemp(prefix="memoryd-scale-"))
    try:
        for n in sizes:
            results[str(n)] = one_size(n, root, sentences, per_note, queries, args, qmd_launcher)
    except OSError as err:  # a full disk, a missing tool: one line, not a traceback
        raise SystemExit(f"bench_scale: {err}") from None
    finally:
        if args.keep:
            print(f"scratch folder kept: {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    if len(sizes) > 1:
        results["growth_largest_over_smallest"] = growth(results, sizes)
    results["total_s"] = round(time.perf_counter() - STARTED, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    report(results, args, qmd_missing=qmd_note if qmd_launcher is None else None)


def report(results: dict[str, Any], args: argparse.Namespace, qmd_missing: str | None) -> None:
    sizes = results["sizes"]
    if not args.no_plot:
        note = plot(results, sizes, Path(args.plot))
        if note:
            print(f"bench_scale: {note}", file=sys.stderr)
        else:
            progress(f"plot written to {args.plot}")
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(table(results, sizes))
    if "growth_largest_over_smallest" in results:
        g = results["growth_largest_over_smallest"]
        print(
            f"\n{g['to_chunks']:,} / {g['from_chunks']:,} chunks ({g['chunks']}x): "
            f"keyword p50 {g['keyword_p50']}x, hybrid p50 {g['hybrid_p50']}x (CPU time: "
            f"{g.get('keyword_cpu_p50')}x, {g.get('hybrid_cpu_p50')}x), "
            f"one-off CLI p50 {g['cli_p50']}x"
        )
    if qmd_missing:
        print(f"\nNO qmd peer in this run: {qmd_missing}")
    print(f"total {results['total_s']:.0f} s; JSON in {args.from_json or args.out}")


if __name__ == "__main__":
    main()
