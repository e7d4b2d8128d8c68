"""Each table's share of the built-in index file, per chunk, on bench_scale.py's corpus.

Run:  .venv/bin/python bench/bench_db_size.py [--chunks 100000] [--keep DIR] [--json]

Writes bench_scale's synthetic notes for about `--chunks` chunks, syncs them in this process
with its seeded 384-d stand-in embedder (text, then vectors, filling the embedding cache as a
real provider does), checkpoints the WAL and prints each table's bytes (SQLite's `dbstat`,
indexes and FTS5 shadow tables under the table they serve) and bytes per chunk.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import sqlean

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_builtin_index import make_sentences
from bench_scale import SeededVectors, build_notes, chunks_per_note, files_bytes, progress


def owner(name: str, tables: dict[str, str]) -> str:
    """The table an index or FTS5 shadow table belongs to."""
    if name in tables and tables[name] != name:
        return tables[name]
    for base in ("chunks_fts", "chunks_tri"):
        if name.startswith(base + "_"):
            return base
    return name


def table_bytes(db: Path) -> dict[str, int]:
    conn = sqlean.connect(str(db))
    try:
        conn.execute("pragma wal_checkpoint(truncate)")
        tables = dict(conn.execute("select name, tbl_name from sqlite_master"))
        out: dict[str, int] = {}
        for name, size in conn.execute("select name, sum(pgsize) from dbstat group by name"):
            key = owner(name, tables)
            out[key] = out.get(key, 0) + int(size)
        free = int(conn.execute("pragma freelist_count").fetchone()[0])
        out["(free pages)"] = free * int(conn.execute("pragma page_size").fetchone()[0])
    finally:
        conn.close()
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def build(root: Path, chunks: int) -> tuple[Path, int]:
    from memoryd.builtin_index import MemoryIndex
    from memoryd.config import resolve_agent, validate_config
    from memoryd.embeddings.base import ProviderSelection

    rng = random.Random(7)
    sentences = make_sentences(rng, 4000)
    ws, db = root / "ws", root / "index.sqlite"
    progress(f"writing notes for ~{chunks:,} chunks")
    build_notes(ws, sentences, chunks, chunks_per_note(sentences))
    cfg = validate_config(
        {
            "agents": {
                "defaults": {"workspace": str(ws), "memorySearch": {"store": {"path": str(db)}}}
            }
        }
    )
    idx = MemoryIndex(
        resolve_agent(cfg).index_settings(), ProviderSelection("seeded", SeededVectors(), "bench")
    )
    try:
        progress("syncing")
        idx.sync()
        n = int(idx.status().to_dict()["chunks"])
    finally:
        idx.close()
    return db, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=100_000)
    ap.add_argument("--keep", type=Path, help="build here and keep it (default: a temp dir)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="memoryd-dbsize-"))
    try:
        db, n = build(root, args.chunks)
        sizes = table_bytes(db)
        out: dict[str, Any] = {
            "chunks": n,
            "file_bytes_per_chunk": round(files_bytes(db) / n),
            "tables": {k: {"bytes": v, "per_chunk": round(v / n)} for k, v in sizes.items()},
        }
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{n:,} chunks, {out['file_bytes_per_chunk']:,} B a chunk on disk")
    for name, t in out["tables"].items():
        print(f"  {name:<22} {t['bytes'] / 2**20:9.1f} MB {t['per_chunk']:7,} B/chunk")


if __name__ == "__main__":
    main()
