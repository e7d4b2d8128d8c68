"""Dataset loaders: LoCoMo conversations → agent workspaces; Cranfield/CISI → one file per abstract.

Everything is written under an output folder (default `bench/out/`) and is rebuilt only when
missing or different, so file mtimes stay stable and the indexes' embedding caches stay warm.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

LOCOMO_CATEGORIES = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}
_DIA = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


@dataclass
class Query:
    qid: str
    text: str
    category: str = ""
    # LoCoMo: evidence dia_ids; classic sets: doc id → gain (> 0)
    evidence: list[str] = field(default_factory=list)
    relevant: dict[str, float] = field(default_factory=dict)


@dataclass
class Turn:
    path: str  # workspace-relative
    line: int  # 1-based
    text: str  # the exact line as written


@dataclass
class Workspace:
    name: str
    root: Path
    queries: list[Query]
    turns: dict[str, Turn] = field(default_factory=dict)  # LoCoMo dia_id → where it was written


@dataclass
class Dataset:
    name: str
    kind: str  # "conversation" | "collection"
    workspaces: list[Workspace]


def _write_if_changed(path: Path, text: str) -> None:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _prune(folder: Path, keep: set[Path]) -> None:
    if not folder.is_dir():
        return
    for p in folder.rglob("*.md"):
        if p not in keep:
            p.unlink()


# --------------------------------------------------------------------------------------- LoCoMo


def _session_date(raw: str) -> str:
    """'1:56 pm on 8 May, 2023' → '2023-05-08'."""
    m = re.search(r"on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", raw)
    if not m:
        raise ValueError(f"unrecognised LoCoMo session date {raw!r}")
    return datetime.strptime(f"{m.group(1)} {m.group(2)} {m.group(3)}", "%d %B %Y").strftime(
        "%Y-%m-%d"
    )


def normalize_dia_id(raw: str) -> str | None:
    """'D1:3' → 'D1:3'; tolerate the odd spellings in LoCoMo ('D:11:26', 'D30:05')."""
    m = _DIA.search(raw)
    return f"D{int(m.group(1))}:{int(m.group(2))}" if m else None


def turn_line(turn: dict[str, Any]) -> str:
    text = " ".join(str(turn.get("text", "")).split())
    line = f"{turn['speaker']}: {text}"
    caption = turn.get("blip_caption")
    if caption:
        line += f" [shares a photo: {' '.join(str(caption).split())}]"
    return line


def locomo_workspace(sample: dict[str, Any], out: Path) -> Workspace:
    """One daily note per session (`memory/<date>.md`, `<date>-session-N.md` on shared dates)."""
    conv = sample["conversation"]
    sid = sample["sample_id"]
    root = out / sid
    numbers = sorted(
        int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k) and conv.get(k)
    )
    dates = {n: _session_date(conv[f"session_{n}_date_time"]) for n in numbers}
    per_date: dict[str, list[int]] = defaultdict(list)
    for n in numbers:
        per_date[dates[n]].append(n)
    turns: dict[str, Turn] = {}
    written: set[Path] = set()
    for n in numbers:
        day = dates[n]
        name = f"{day}.md" if len(per_date[day]) == 1 else f"{day}-session-{n}.md"
        rel = f"memory/{name}"
        lines = [f"# {conv[f'session_{n}_date_time']}", ""]
        for turn in conv[f"session_{n}"]:
            line = turn_line(turn)
            lines.append(line)
            dia = normalize_dia_id(str(turn.get("dia_id", "")))
            if dia:
                turns[dia] = Turn(rel, len(lines), line)
        path = root / rel
        _write_if_changed(path, "\n".join(lines) + "\n")
        written.add(path)
    _prune(root, written)
    queries = []
    for i, qa in enumerate(sample.get("qa", [])):
        evidence = [d for d in (normalize_dia_id(str(e)) for e in qa.get("evidence", [])) if d]
        cat = qa.get("category")
        queries.append(
            Query(
                qid=f"{sid}:q{i}",
                text=str(qa["question"]),
                category=LOCOMO_CATEGORIES.get(cat, str(cat)) if cat is not None else "",
                evidence=evidence,
            )
        )
    mapping = {d: {"path": t.path, "line": t.line, "text": t.text} for d, t in turns.items()}
    _write_if_changed(
        root.parent / f"{sid}.turns.json", json.dumps(mapping, indent=0, sort_keys=True)
    )
    return Workspace(sid, root, queries, turns)


def load_locomo(
    path: Path, out: Path, samples: list[str] | None = None, name: str = "locomo"
) -> Dataset:
    data = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = [data]
    chosen = [s for s in data if not samples or s["sample_id"] in samples]
    if samples:
        missing = set(samples) - {s["sample_id"] for s in chosen}
        if missing:
            raise SystemExit(f"--samples: not in {path}: {', '.join(sorted(missing))}")
    return Dataset(name, "conversation", [locomo_workspace(s, out / name) for s in chosen])


# --------------------------------------------------------------------------------- SMART format


def _smart_records(text: str) -> list[tuple[str, dict[str, str]]]:
    """Parse `.I id` / `.T` / `.W` … records into (id, {field: text})."""
    records: list[tuple[str, dict[str, str]]] = []
    current: dict[str, list[str]] | None = None
    fld = ""
    for line in text.splitlines():
        if line.startswith(".I"):
            current = {}
            records.append((line[2:].strip(), current))  # type: ignore[arg-type]
            fld = ""
            continue
        m = re.match(r"^\.([A-Z])\s*$", line)
        if m and current is not None:
            fld = m.group(1)
            current.setdefault(fld, [])
            continue
        if current is not None and fld:
            current[fld].append(line)
    return [(i, {k: "\n".join(v).strip() for k, v in rec.items()}) for i, rec in records]  # type: ignore[union-attr]


def _doc_text(rec: dict[str, str]) -> str:
    title = " ".join(rec.get("T", "").split())
    body = rec.get("W", "")
    # Cranfield repeats the title as the abstract's opening: a heading would count it twice
    repeated = " ".join(body.split()).startswith(title)
    lines = [f"# {title}", ""] if title and not repeated else []
    lines += [ln.strip() for ln in body.splitlines() if ln.strip()]
    return "\n".join(lines) + "\n"


def _collection_workspace(name: str, docs: list[tuple[str, dict[str, str]]], out: Path) -> Path:
    root = out / name
    written = set()
    for doc_id, rec in docs:
        path = root / "memory" / "docs" / f"{doc_id}.md"
        _write_if_changed(path, _doc_text(rec))
        written.add(path)
    _prune(root, written)
    return root


def doc_id_of(path: str) -> str | None:
    m = re.search(r"(?:^|/)docs/([^/]+)\.md$", path)
    return m.group(1) if m else None


def load_cranfield(folder: Path, out: Path) -> Dataset:
    docs = [
        (str(int(i)), rec)
        for i, rec in _smart_records(
            (folder / "cran.all.1400").read_text(encoding="utf-8", errors="replace")
        )
    ]
    qrecs = _smart_records((folder / "cran.qry").read_text(encoding="utf-8", errors="replace"))
    rel: dict[int, dict[str, float]] = defaultdict(dict)
    for line in (folder / "cranqrel").read_text().splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        q, d, grade = int(parts[0]), str(int(parts[1])), int(parts[2])
        if 1 <= grade <= 4:
            rel[q][d] = float(5 - grade)  # grade 1 (most relevant) → gain 4
    queries = [
        Query(qid=f"cranfield:{n}", text=" ".join(rec.get("W", "").split()), relevant=rel[n])
        for n, (_, rec) in enumerate(qrecs, start=1)  # queries are numbered by position
        if rel.get(n)
    ]
    root = _collection_workspace("cranfield", docs, out)
    return Dataset("cranfield", "collection", [Workspace("cranfield", root, queries)])


def load_cisi(folder: Path, out: Path) -> Dataset:
    docs = [
        (str(int(i)), rec)
        for i, rec in _smart_records(
            (folder / "CISI.ALL").read_text(encoding="utf-8", errors="replace")
        )
    ]
    qrecs = _smart_records((folder / "CISI.QRY").read_text(encoding="utf-8", errors="replace"))
    rel: dict[int, dict[str, float]] = defaultdict(dict)
    for line in (folder / "CISI.REL").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2:
            rel[int(parts[0])][str(int(parts[1]))] = 1.0
    queries = [
        Query(qid=f"cisi:{int(i)}", text=" ".join(rec.get("W", "").split()), relevant=rel[int(i)])
        for i, rec in qrecs
        if rel.get(int(i))
    ]
    root = _collection_workspace("cisi", docs, out)
    return Dataset("cisi", "collection", [Workspace("cisi", root, queries)])
