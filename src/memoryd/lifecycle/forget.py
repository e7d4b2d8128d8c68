"""`memoryd forget` and `reset`: lines go only if they still hash as shown, into a 0600 backup
and the tombstones."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any, Final

import filelock

from ..config import ResolvedAgent
from ..core.forgotten import Tombstones, forgotten_path
from ..core.layout import MemoryRoot, display_path, locate
from ..errors import InvalidInput, MemoryWriteFailed, StateError
from ..fsio import (
    SQLITE_SIDE_FILES,
    private_dir,
    read_file,
    read_private,
    rewrite_file,
    wipe_folder,
    write_private_atomic,
)
from ..memfiles import list_transcripts, transcript_display_path
from .session_export import (
    load_tombstones,
    manifest_name,
    parse_transcript,
    read_manifest,
)
from .writes import check_writable

#: `PATH#L3`, `PATH#L3-L7` or `PATH#L3-7`; a bare PATH is the whole file.
_TARGET_RE: Final = re.compile(r"^(?P<path>\S+?)(?:#L(?P<start>\d+)(?:-L?(?P<end>\d+))?)?$", re.I)
#: The most lines one `forget` removes from a file (a whole-file forget of a larger file is refused).
MAX_LINES: Final = 2000


def parse_target(raw: str) -> tuple[str, list[int] | None] | None:
    """The PATH form of a `forget` argument (one word ending in `#L<n>[-L<m>]` or `.md`, or
    holding a `/`) as (path as typed, its line numbers or None for all), or None for a query."""
    m = _TARGET_RE.match(raw.strip())
    if m is None:
        return None
    path = m["path"]
    if not (m["start"] or path.lower().endswith(".md") or "/" in path):
        return None
    if not m["start"]:
        return path, None
    start, end = int(m["start"]), int(m["end"] or m["start"])
    if start < 1 or end < start:
        raise InvalidInput(f"bad line range in {raw!r}: use PATH#L<first>-L<last>, first ≥ 1")
    return path, list(range(start, end + 1))


@dataclass(frozen=True, slots=True)
class Selection:
    """Whole lines of one memory file chosen for removal, by line number."""

    path: str
    root: MemoryRoot
    rel: PurePosixPath
    lines: dict[int, str]

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """The chosen line numbers as inclusive runs."""
        out: list[tuple[int, int]] = []
        for n in sorted(self.lines):
            if out and out[-1][1] == n - 1:
                out[-1] = (out[-1][0], n)
            else:
                out.append((n, n))
        return out

    @property
    def sha256(self) -> str:
        """What the lines were when shown: the removal goes ahead only if they still are."""
        h = hashlib.sha256()
        for n in sorted(self.lines):
            h.update(f"{n}\t{self.lines[n]}\n".encode())
        return h.hexdigest()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "ranges": [list(r) for r in self.ranges],
            "lines": [{"line": n, "text": self.lines[n]} for n in sorted(self.lines)],
            "sha256": self.sha256,
        }


def _lines_of(data: bytes) -> list[bytes]:
    """The file's lines with their endings, numbered as search and `memoryd get` number them."""
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _text(line: bytes) -> str:
    return line.rstrip(b"\n").removesuffix(b"\r").decode("utf-8", errors="replace")


def select_lines(
    agent: ResolvedAgent,
    roots: list[MemoryRoot],
    path: str,
    numbers: list[int] | None,
    *,
    clip: bool = False,
) -> Selection:
    """The lines `numbers` (all when None) of a file `memory_get` would serve; a line past the
    end is `InvalidInput`, or left out with `clip` (a hit from an older index)."""
    ws = str(agent.workspace)
    root, rel = locate(path, roots, workspace=ws)
    shown = display_path(root, rel, workspace=ws)
    got = read_file(root, rel, anchor=agent.workspace)
    if got is None:
        raise InvalidInput(f"{shown} does not exist")
    lines = [_text(line) for line in _lines_of(got.data)]
    wanted = list(range(1, len(lines) + 1)) if numbers is None else sorted(set(numbers))
    if clip:
        wanted = [n for n in wanted if n <= len(lines)]
    if not wanted:
        raise InvalidInput(f"{shown} is empty: nothing to forget")
    if wanted[-1] > len(lines):
        raise InvalidInput(f"{shown} has {len(lines)} lines; line {wanted[-1]} is past the end")
    if len(wanted) > MAX_LINES:
        raise InvalidInput(f"at most {MAX_LINES} lines per forget ({shown}: {len(wanted)})")
    return Selection(shown, root, rel, {n: lines[n - 1] for n in wanted})


def _add_tombstones(agent: ResolvedAgent, lines: list[str]) -> Tombstones:
    path = forgotten_path(agent.state.sessions_dir)
    private_dir(path.parent)
    with filelock.FileLock(str(path) + ".lock", timeout=30, mode=0o600):
        current = Tombstones.from_json(read_private(path)) or Tombstones()
        updated = current.with_lines(lines)
        write_private_atomic(path, updated.to_json())
    return updated


def _write_backup(agent: ResolvedAgent, sel: Selection, now: datetime) -> Path:
    folder = private_dir(agent.state.root / "forgotten-backups")  # `reset` keeps it
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", sel.path).strip("_")[:80]
    target = folder / f"{now.strftime('%Y%m%dT%H%M%S%f')}-{slug}.txt"
    ranges = ", ".join(f"{a}-{b}" for a, b in sel.ranges)
    head = f"# memoryd forget: lines {ranges} of {sel.path} at {now.isoformat()}\n"
    body = "".join(f"{n}\t{sel.lines[n]}\n" for n in sorted(sel.lines))
    write_private_atomic(target, (head + body).encode("utf-8"))
    return target


def forget_lines(
    agent: ResolvedAgent, sel: Selection, expected_sha256: str, *, now: datetime
) -> dict[str, Any]:
    """Remove `sel`'s lines if they are still the ones shown (`expected_sha256`); see module doc."""
    check_writable(agent, "forget")
    if sel.sha256 != expected_sha256:
        raise MemoryWriteFailed(
            f"{sel.path} changed since its lines were shown; nothing was removed (run forget again)"
        )

    def edit(old: bytes) -> bytes:
        kept: list[bytes] = []
        removed: dict[int, str] = {}
        for n, line in enumerate(_lines_of(old), 1):
            if n in sel.lines:
                removed[n] = _text(line)
            else:
                kept.append(line)
        if removed != sel.lines:
            raise MemoryWriteFailed(
                f"{sel.path} changed while forgetting; nothing was removed (run forget again)"
            )
        return b"".join(kept)

    backup = _write_backup(agent, sel, now)
    try:
        rewrite_file(sel.root, sel.rel, edit, anchor=agent.workspace)
    except BaseException:
        backup.unlink(missing_ok=True)  # nothing was removed: nothing to keep
        raise
    tombstones = _add_tombstones(agent, list(sel.lines.values()))
    return {
        "path": sel.path,
        "ranges": [list(r) for r in sel.ranges],
        "linesRemoved": len(sel.lines),
        "backup": str(backup),
        "tombstones": len(tombstones.hashes),
    }


def transcripts_with_forgotten(agent: ResolvedAgent) -> list[str]:
    """The transcripts (as search names them) holding text that matches a tombstone."""
    tombstones = load_tombstones(agent)
    out: list[str] = []
    if tombstones is None:
        return out
    for path in list_transcripts(agent.state.sessions_dir):
        try:
            messages = parse_transcript(path, sanitize=True)[0]
        except OSError:
            continue
        if any(tombstones.spans(m.text) for m in messages):
            out.append(transcript_display_path(path))
    return out


def remove_derived(agent: ResolvedAgent, *, index_file: bool, qmd_home: bool) -> list[str]:
    """Delete what memoryd derived and no open engine holds (health, this agent's exports, the
    index file, the qmd home); never notes, transcripts, flush state, tombstones or backups."""
    st = agent.state
    gone: list[str] = []
    files = [st.health]
    if index_file:
        db = agent.index_path
        files += [db, *(db.with_name(db.name + side) for side in SQLITE_SIDE_FILES)]
    exports = agent.qmd_settings().exports_dir
    if not exports.is_relative_to(st.qmd_home):
        files += _exports_of(exports, agent.agent_id)
    for f in files:
        try:
            f.unlink()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise StateError(f"cannot remove {f}: {err.strerror or err}") from None
        gone.append(str(f))
    if not qmd_home:
        return gone
    if st.qmd_home.is_symlink():
        raise StateError(f"refusing to reset through a symlink at {st.qmd_home}")
    # the models qmd downloaded are not derived from memory: they stay
    models = st.qmd_home / "xdg-cache" / "qmd" / "models"
    return gone + [str(p) for p in wipe_folder(st.qmd_home, {models})]


def _exports_of(folder: Path, agent_id: str) -> list[Path]:
    """This agent's exports in a shared `exportDir` (its manifest names them) and the manifest."""
    manifest = folder / manifest_name(agent_id)
    try:
        names = read_manifest(manifest)
    except StateError:  # e.g. a link planted there: the manifest alone goes
        names = {}
    return [*(folder / n for n in names if n.endswith(".md") and "/" not in n), manifest]
