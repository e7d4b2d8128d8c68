"""Tombstones of forgotten text: keyed hashes of its word shingles (never the text) so that
`scrub_messages` keeps transcripts from bringing it back."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from .text import merge_spans
from .transcripts import Message

#: The tombstone file, next to the agent's `sessions/` folder: kept by `reset`, per agent.
FORGOTTEN_FILE: Final = "forgotten.json"
#: Words per shingle: long enough not to match ordinary phrases, short enough to catch a quote.
SHINGLE: Final = 6
#: A line shorter than this many words is too generic to tombstone on its own.
MIN_WORDS: Final = 3
_FORMAT: Final = 1
_WORD_RE: Final = re.compile(r"\w+")
_DIGEST_BYTES: Final = 12
#: Where a sentence ends: `.`, `!`, `?` or `;` followed by a space, or a line break.
_SENTENCE_END_RE: Final = re.compile(r"[.!?;](?=\s)\s*|\n\s*")


def forgotten_path(sessions_dir: Path) -> Path:
    """The tombstone file of the agent whose transcripts live in `sessions_dir`."""
    return sessions_dir.parent / FORGOTTEN_FILE


def words(text: str) -> list[tuple[str, int, int]]:
    """(normalized word, start, end) for each word of `text`, offsets into `text` itself."""
    fold = unicodedata.normalize
    return [
        (fold("NFKC", m.group()).casefold(), m.start(), m.end()) for m in _WORD_RE.finditer(text)
    ]


@dataclass(frozen=True, slots=True)
class Tombstones:
    """The keyed hashes of everything forgotten: `n:hex` for a run of n words."""

    key: str = field(default_factory=lambda: secrets.token_hex(16))
    hashes: frozenset[str] = frozenset()

    def _hash(self, run: Sequence[str]) -> str:
        h = hashlib.blake2b(
            "\x1f".join(run).encode("utf-8"), key=bytes.fromhex(self.key), digest_size=_DIGEST_BYTES
        )
        return f"{len(run)}:{h.hexdigest()}"

    def with_lines(self, lines: Iterable[str]) -> Tombstones:
        """These tombstones plus those of removed `lines`: shingles across them, and each short
        line whole."""
        stream: list[str] = []
        added: set[str] = set()
        for line in lines:
            ws = [w for w, _s, _e in words(line)]
            if MIN_WORDS <= len(ws) < SHINGLE:
                added.add(self._hash(ws))
            stream.extend(ws)
        for i in range(len(stream) - SHINGLE + 1):
            added.add(self._hash(stream[i : i + SHINGLE]))
        return replace(self, hashes=self.hashes | added)

    @property
    def digest(self) -> str:
        """Changes whenever a tombstone is added: an export made before must be made again."""
        return hashlib.sha256("\n".join(sorted(self.hashes)).encode()).hexdigest()[:16]

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of `text` whose words match a tombstone, merged."""
        if not self.hashes:
            return []
        ws = words(text)
        norm = [w for w, _s, _e in ws]
        found = []
        for n in {int(h.split(":", 1)[0]) for h in self.hashes}:
            for i in range(len(ws) - n + 1):
                if self._hash(norm[i : i + n]) in self.hashes:
                    found.append((ws[i][1], ws[i + n - 1][2]))
        return merge_spans(found)

    def scrub(self, text: str) -> str:
        """`text` without each sentence holding a tombstone, so a partly quoted line's rest goes too."""
        spans = self.spans(text)
        if not spans:
            return text
        cuts = []
        for start, end in spans:
            a = max((m.end() for m in _SENTENCE_END_RE.finditer(text, 0, start)), default=0)
            b = _SENTENCE_END_RE.search(text, end)
            cuts.append((a, b.end() if b else len(text)))
        pieces, at = [], 0
        for start, end in merge_spans(cuts):
            pieces.append(text[at:start])
            at = end
        pieces.append(text[at:])
        return re.sub(r"\s+", " ", " ".join(p.strip() for p in pieces)).strip()

    def to_json(self) -> bytes:
        payload = {"version": _FORMAT, "key": self.key, "hashes": sorted(self.hashes)}
        return (json.dumps(payload, indent=1) + "\n").encode()

    @classmethod
    def from_json(cls, raw: bytes | None) -> Tombstones | None:
        """The tombstones in `raw` (a tombstone file's bytes); None when absent or unreadable."""
        try:
            data: Any = json.loads(raw or b"")
            key, hashes = data["key"], data["hashes"]
            bytes.fromhex(key)
        except (ValueError, TypeError, KeyError):
            return None
        if data.get("version") != _FORMAT or not isinstance(hashes, list):
            return None
        return cls(key, frozenset(h for h in hashes if isinstance(h, str) and ":" in h))


def scrub_messages(messages: Iterable[Message], tombstones: Tombstones | None) -> list[Message]:
    """`messages` with forgotten text cut out; a message left with no word is dropped."""
    msgs = list(messages)
    if tombstones is None or not tombstones.hashes:
        return msgs
    out = []
    for m in msgs:
        text = tombstones.scrub(m.text)
        if text is m.text:
            out.append(m)
        elif words(text):
            out.append(replace(m, text=text))
    return out
