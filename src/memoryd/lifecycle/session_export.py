"""Session transcripts (`<state>/agents/<id>/sessions/*.jsonl`), and their sanitised exports as
Markdown for qmd's `sessions-<agent>` collection."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import filelock

from ..config import ResolvedAgent
from ..core.forgotten import Tombstones, forgotten_path, scrub_messages
from ..core.transcripts import Message, parse_transcript_text, render_transcript
from ..errors import SessionExportError, StateError
from ..fsio import open_private, private_dir, read_private, write_private_atomic
from ..memfiles import list_transcripts


def manifest_name(agent_id: str) -> str:
    """Per agent, so two agents sharing one `exportDir` never delete each other's exports."""
    return f".memoryd-sessions-{agent_id}.json"


def session_id(path: Path) -> str:
    """`abc.jsonl` → `abc`."""
    return path.name.removesuffix(".jsonl")


def parse_transcript(path: Path, *, sanitize: bool = False) -> tuple[list[Message], int, int]:
    """(messages, malformed lines, lines) of one transcript; `OSError` only when it cannot be read."""
    with open_private(path) as fh:  # never through a link planted among the transcripts
        data = fh.read()
    return parse_transcript_text(data.decode("utf-8", errors="replace"), sanitize=sanitize)


# Bump when the rendering changes so every export is rewritten once.
_FORMAT_VERSION: Final = 1


@dataclass
class ExportReport:
    """What one export pass did, by session id; `skipped` maps session id to a reason."""

    export_dir: Path
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """True when qmd has something new to index."""
        return bool(self.written or self.deleted)


def read_manifest(path: Path) -> dict[str, dict[str, Any]]:
    try:
        raw = read_private(path)
        data = json.loads(raw) if raw is not None else None
    except ValueError:
        return {}
    if not isinstance(data, dict) or data.get("version") != _FORMAT_VERSION:
        return {}
    exports = data.get("exports")
    if not isinstance(exports, dict):
        return {}
    return {k: v for k, v in exports.items() if isinstance(v, dict)}


def export_sessions(agent: ResolvedAgent, *, now: datetime) -> ExportReport:
    """Bring the agent's session exports up to date."""
    out_dir = agent.qmd_settings().exports_dir
    days = agent.memory.qmd.sessions.retention_days
    cutoff = (now - timedelta(days=days)).timestamp() if days is not None else None
    report = ExportReport(export_dir=out_dir)
    try:
        private_dir(out_dir)
        with filelock.FileLock(str(out_dir / ".memoryd-sessions.lock"), timeout=60, mode=0o600):
            _export_locked(agent, out_dir, cutoff, report)
    except filelock.Timeout:
        raise SessionExportError(f"timed out waiting for the export lock in {out_dir}") from None
    except (OSError, StateError) as err:
        raise SessionExportError(f"cannot export sessions to {out_dir}: {err}") from None
    return report


def load_tombstones(agent: ResolvedAgent) -> Tombstones | None:
    """The agent's tombstones, or None when nothing was forgotten yet."""
    return Tombstones.from_json(read_private(forgotten_path(agent.state.sessions_dir)))


def _export_locked(
    agent: ResolvedAgent, out_dir: Path, cutoff: float | None, report: ExportReport
) -> None:
    manifest_path = out_dir / manifest_name(agent.agent_id)
    old = read_manifest(manifest_path)
    # forgotten text never reaches an export; a new tombstone makes every export be made again
    tombstones = load_tombstones(agent)
    forgotten = tombstones.digest if tombstones is not None else None
    new: dict[str, dict[str, Any]] = {}
    for src in list_transcripts(agent.state.sessions_dir):
        sid = session_id(src)
        if not sid:
            continue
        name = f"{sid}.md"
        target = out_dir / name
        try:
            st = src.stat()
        except OSError:
            report.skipped[sid] = "unreadable"
            continue
        if cutoff is not None and st.st_mtime < cutoff:
            report.skipped[sid] = "expired"
            continue
        seen = old.get(name)
        if (
            seen is not None
            and seen.get("size") == st.st_size
            and seen.get("mtimeNs") == st.st_mtime_ns
            and seen.get("forgotten") == forgotten
            and target.is_file()
        ):
            new[name] = seen
            report.unchanged.append(sid)
            continue
        try:
            parsed = parse_transcript(src, sanitize=True)[0]
        except OSError:
            report.skipped[sid] = "unreadable"
            if seen is not None:
                new[name] = seen  # keep the last good export through a transient error
            continue
        messages = scrub_messages(parsed, tombstones)
        if not messages:
            report.skipped[sid] = "empty"
            continue
        doc = f"# Session {sid}\n\n{render_transcript(messages)}\n".encode()
        current = read_private(target)
        if current == doc:
            report.unchanged.append(sid)
        else:
            write_private_atomic(target, doc)  # its temp file is no `*.md` for qmd to index
            report.written.append(sid)
        # the stat from before the read: a transcript that grew meanwhile is exported again
        new[name] = {"source": src.name, "size": st.st_size, "mtimeNs": st.st_mtime_ns}
        if forgotten is not None:
            new[name]["forgotten"] = forgotten

    # exports of transcripts deleted, expired or now empty go
    for name in sorted(set(old) - set(new)):
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()
            report.deleted.append(name[: -len(".md")])
    if new != old:
        payload = {"version": _FORMAT_VERSION, "exports": new}
        data = (json.dumps(payload, indent=2, sort_keys=True) + "\n").encode()
        write_private_atomic(manifest_path, data)
