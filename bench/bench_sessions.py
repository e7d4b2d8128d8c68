"""A year of session transcripts in the built-in index: the first sync, re-syncs after one
changed day, and the retention dropping old sessions.

Run:  .venv/bin/python bench/bench_sessions.py [--days 365] [--messages 200] [--append 60]

It writes `--days` daily transcripts of about `--messages` messages each in OpenClaw's JSONL
shape (a session header, user and assistant messages with text blocks, thinking blocks, tool
calls and their results, each file's mtime on its day), and measures, once text-only (no
embedder) and once with vectors from a free stand-in embedder (bench_scale.py's SeededVectors,
so the time is the index's own, not a model's):

* the first sync: time, chunks, DB size;
* a re-sync with nothing changed (a stat of every transcript);
* a re-sync after `--append` messages were appended to the newest session (more than
  `sync.sessions.deltaMessages`, so it is due), in the same process and in a new one;
* a re-sync after one message in the middle of a session half a year old was edited;
* each as a share of the first sync's time (the target is under 2 %), with the chunk rows
  written and the texts sent to the embedder;
* `memory.qmd.sessions.retentionDays = --retention-days` applied on the next sync: time,
  chunks left, and whether anything was rebuilt or embedded.

With `--baseline REV` it measures instead the ordinary sync, notes without transcripts, this
checkout beside a git revision, each in its own process and taking turns (`_side_by_side.py`):
bench_builtin_index.py's workspace of `--chunks` chunks indexed from scratch `--rounds` times per
side (the text phase and vector writes; document vectors are seeded per sentence, so no model
runs), the median chunks/s of each and their ratio.

Figures are JSON (stdout and bench/out/sessions.json); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np
from bench_builtin_index import build_workspace, make_sentences
from bench_scale import SeededVectors, files_bytes

from memoryd.builtin_index import MemoryIndex
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.embeddings.base import Matrix, ProviderSelection

DAY = 86_400


class CountingSeeded(SeededVectors):
    """SeededVectors that counts the texts it embeds."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def embed_documents(self, texts: Sequence[str], *, deadline: float | None = None) -> Matrix:
        self.texts += len(texts)
        return super().embed_documents(texts, deadline=deadline)


class Transcripts:
    """Writes OpenClaw-shaped transcripts from a fixed pool of sentences."""

    def __init__(self, rng: random.Random, sentences: list[str]) -> None:
        self.rng = rng
        self.sentences = sentences

    def _text(self, lo: int, hi: int) -> str:
        return " ".join(self.rng.choice(self.sentences) for _ in range(self.rng.randint(lo, hi)))

    def record(self, i: int, at: float) -> str:
        """The `i`-th record of a session: user, assistant (sometimes thinking and a tool call
        first), and now and then a tool result, which the index skips."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
        base: dict[str, Any] = {
            "type": "message",
            "id": uuid.UUID(int=self.rng.getrandbits(128)).hex[:8],
            "timestamp": stamp,
        }
        if i % 2 == 0:
            message: dict[str, Any] = {
                "role": "user",
                "content": [{"type": "text", "text": self._text(1, 2)}],
            }
        elif i % 7 == 5:
            message = {
                "role": "toolResult",
                "toolName": "read",
                "content": [{"type": "text", "text": self._text(2, 4)}],
            }
        else:
            content: list[dict[str, Any]] = []
            if i % 5 == 1:
                content.append({"type": "thinking", "thinking": self._text(1, 2)})
            content.append({"type": "text", "text": self._text(2, 5)})
            if i % 3 == 0:
                content.append(
                    {"type": "toolCall", "id": "call_1", "name": "read", "arguments": {"path": "x"}}
                )
            message = {"role": "assistant", "content": content}
        return json.dumps({**base, "message": message})

    def session(self, sid: str, start: float, messages: int) -> list[str]:
        header = {"type": "session", "version": 3, "id": sid, "timestamp": start, "cwd": "/w"}
        return [json.dumps(header)] + [self.record(i, start + 30 * i) for i in range(messages)]


def write_year(
    sessions_dir: Path, gen: Transcripts, days: int, messages: int, now: float
) -> list[Path]:
    """One session a day for `days` days ending today, oldest first, each file dated its day."""
    sessions_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(days):
        day_start = now - (days - 1 - d) * DAY - 12 * 3600
        sid = str(uuid.UUID(int=gen.rng.getrandbits(128)))
        p = sessions_dir / f"{sid}.jsonl"
        n = max(2, int(gen.rng.gauss(messages, messages / 10)))
        p.write_text("\n".join(gen.session(sid, day_start, n)) + "\n")
        end = day_start + 30 * n
        os.utime(p, (end, end))
        paths.append(p)
    return paths


def agent(ws: Path, retention_days: int | None = None) -> ResolvedAgent:
    data: dict[str, Any] = {
        "agents": {
            "defaults": {
                "workspace": str(ws),
                "memorySearch": {
                    "sources": ["memory", "sessions"],
                    "experimental": {"sessionMemory": True},
                },
            }
        }
    }
    if retention_days is not None:
        data["memory"] = {"qmd": {"sessions": {"retentionDays": retention_days}}}
    return resolve_agent(validate_config(data))


def timed(idx: MemoryIndex) -> tuple[float, Any]:
    t = time.perf_counter()
    report = idx.sync()
    return time.perf_counter() - t, report


def share(part: float, whole: float) -> float:
    return round(100 * part / whole, 3)


def one_mode(
    name: str, root: Path, args: argparse.Namespace, embedder: CountingSeeded | None
) -> dict[str, object]:
    os.environ["MEMORYD_STATE_DIR"] = str(root / f"state-{name}")
    ws = root / f"ws-{name}"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# Memory\nThe deploy target is fly.io in region ams.\n")
    rng = random.Random(42)
    gen = Transcripts(rng, make_sentences(rng, 4000))
    a = agent(ws)
    now = time.time()
    paths = write_year(a.state.sessions_dir, gen, args.days, args.messages, now)
    mb = sum(p.stat().st_size for p in paths) / 2**20

    def new_index(ag: ResolvedAgent = a) -> MemoryIndex:
        return MemoryIndex(ag.index_settings(), ProviderSelection(name, embedder, "bench"))

    def embedded() -> int:
        return embedder.texts if embedder is not None else 0

    out: dict[str, object] = {
        "transcripts": len(paths),
        "transcript_mb": round(mb, 1),
        "messages_per_transcript": args.messages,
    }
    idx = new_index()
    first_s, report = timed(idx)
    counts = idx.store.counts()
    out |= {
        "first_sync_s": round(first_s, 2),
        "chunks": counts["chunks"],
        "db_mb": round(files_bytes(idx.path) / 2**20, 1),
        "first_sync_texts_embedded": embedded(),
        "first_sync_chunks_per_s": round(counts["chunks"] / first_s),
    }
    print(f"{name}: first sync {first_s:.1f}s, {counts['chunks']} chunks", file=sys.stderr)

    def resync(label: str, index: MemoryIndex, started: float | None = None) -> None:
        before = embedded()
        t = time.perf_counter() if started is None else started
        report = index.sync()
        s = time.perf_counter() - t
        out[f"{label}_s"] = round(s, 4)
        out[f"{label}_pct_of_first"] = share(s, first_s)
        out[f"{label}_chunks_written"] = report.chunks_written
        out[f"{label}_texts_embedded"] = embedded() - before
        out[f"{label}_files_changed"] = report.files_changed

    resync("resync_unchanged", idx)

    # today's session goes on: more messages than sync.sessions.deltaMessages, so it is due
    newest = paths[-1]
    with newest.open("a") as fh:
        n0 = sum(1 for _ in newest.open())
        for i in range(args.append):
            fh.write(gen.record(n0 + i, now + 30 * i) + "\n")
    resync("resync_after_append", idx)

    # the same, as a new process sees it (`memoryd index`): the store opened, baselines read
    yesterday = paths[-2]
    with yesterday.open("a") as fh:
        n0 = sum(1 for _ in yesterday.open())
        for i in range(args.append):
            fh.write(gen.record(n0 + i, now + 30 * i) + "\n")
    t = time.perf_counter()
    fresh = new_index()
    resync("resync_after_append_new_index", fresh, started=t)
    fresh.close()

    # a session half a year old, one message in its middle edited (the file is rewritten)
    middle = paths[len(paths) // 2]
    lines = middle.read_text().splitlines()
    k = len(lines) // 2
    while json.loads(lines[k])["message"]["role"] != "user":
        k += 1
    record = json.loads(lines[k])
    record["message"]["content"][0]["text"] += " (edited: the ferry leaves at nine, not ten)"
    lines[k] = json.dumps(record)
    st = middle.stat()
    middle.write_text("\n".join(lines) + "\n")
    os.utime(middle, (st.st_atime, st.st_mtime + 1))
    resync("resync_after_middle_edit", idx)

    # retention: sessions idle longer than N days leave the index on the next sync
    before = idx.store.counts()["chunks"]
    idx.close()
    kept = new_index(agent(ws, args.retention_days))
    t = time.perf_counter()
    gone_before = embedded()
    report = kept.sync()
    s = time.perf_counter() - t
    after = kept.store.counts()
    out |= {
        "retention_days": args.retention_days,
        "retention_sync_s": round(s, 3),
        "retention_pct_of_first": share(s, first_s),
        "retention_files_removed": report.files_removed,
        "retention_chunks_before": before,
        "retention_chunks_after": after["chunks"],
        "retention_rebuilt": report.reindexed,
        "retention_texts_embedded": embedded() - gone_before,
        "retention_db_mb_before_vacuum": round(files_bytes(kept.path) / 2**20, 1),
    }
    kept.close()
    return out


def ordinary_sync_side_by_side(args: argparse.Namespace, root: Path) -> dict[str, object]:
    """Notes-only first syncs, this checkout and `args.baseline` in turns: chunks/s each."""
    import statistics

    from _side_by_side import pair

    rng = random.Random(7)
    sentences = make_sentences(rng, 400)
    vectors = root / "sentences.npz"
    np.savez(
        vectors, sentences=np.array(sentences), vectors=SeededVectors().embed_documents(sentences)
    )
    ws = build_workspace(root, sentences, args.chunks, rng)
    children = pair(args.baseline, root)
    rates: dict[str, list[float]] = {c.name: [] for c in children}
    chunks = 0
    try:
        for i in range(args.rounds):
            for child in children if i % 2 == 0 else children[::-1]:
                got = child.ask(op="index", workspace=str(ws), vectors=str(vectors), warm=[])
                chunks = int(got["chunks"])
                rates[child.name].append(chunks / float(got["s"]))
                print(f"{child.name}: {rates[child.name][-1]:.0f} chunks/s", file=sys.stderr)
    finally:
        for child in children:
            child.close()
    this, base = statistics.median(rates["this"]), statistics.median(rates["baseline"])
    return {
        "baseline": args.baseline,
        "chunks": chunks,
        "rounds": args.rounds,
        "this_sync_chunks_per_s": round(this),
        "baseline_sync_chunks_per_s": round(base),
        "sync_chunks_per_s_this_over_baseline": round(this / base, 3),
        "this_all": [round(r) for r in rates["this"]],
        "baseline_all": [round(r) for r in rates["baseline"]],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--append", type=int, default=60, help="messages appended to one session")
    ap.add_argument("--retention-days", type=int, default=90)
    ap.add_argument("--out", default="bench/out/sessions.json")
    ap.add_argument("--baseline", help="a git revision: compare the ordinary sync with it instead")
    ap.add_argument("--chunks", type=int, default=7900, help="notes' chunks (--baseline)")
    ap.add_argument("--rounds", type=int, default=4, help="first syncs per side (--baseline)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="memoryd-sessions-"))
    if args.baseline:
        try:
            side = ordinary_sync_side_by_side(args, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(side, indent=2))
        print(json.dumps(side, indent=2))
        return
    try:
        results = {
            "text_only": one_mode("text", root, args, None),
            "vectors": one_mode("seeded", root, args, CountingSeeded()),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for mode in results.values():
        mode["resync_under_2pct"] = all(
            float(v) < 2  # type: ignore[arg-type]
            for k, v in mode.items()
            if k.startswith("resync_after") and k.endswith("_pct_of_first")
        )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
