"""FTS5's own `bm25()` top-k, computed from postings held in memory by a long-lived process.

FTS5 answers an OR of terms by scoring every row that matches any of them; the same scores
follow from each term's postings (row, term frequency), the rows' token counts and two corpus
figures, read once through `fts5vocab` and FTS5's shadow tables and kept in numpy arrays.

**Exact.** The formula, constants and floating-point operations are FTS5's (`fts5Bm25Function`),
in its order, and ties go by rowid as FTS5's scan leaves them; query terms are tokenized by FTS5
itself. A term that is not exactly one token (a phrase: `wind-tunnel`, CJK runs) is left to FTS5:
`top` answers None and the caller runs the SQL (`tests/test_postings.py` compares the two).

**Never stale.** Everything is keyed by FTS5's structure and averages records, read in the same
snapshot as the postings: any write to the keyword index, by any process, drops what was held.

**Paid for only where it pays.** The first search at an index state goes to FTS5, so a one-off
CLI search never builds any of it; later ones load postings per term as queries use them, up to
MAX_POSTINGS, least recently used first out.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.text import has_cjk

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    F32 = npt.NDArray[np.float32]
    F64 = npt.NDArray[np.float64]
    I32 = npt.NDArray[np.int32]
    I64 = npt.NDArray[np.int64]

#: FTS5's bm25() constants (fts5_aux.c).
K1 = 1.2
B = 0.75
#: Postings held at most (row index int32 + frequency float32, exact for counts below 2**24:
#: 8 bytes each, 32 MB).
MAX_POSTINGS = 4_000_000
#: Query terms whose tokens are remembered (their tokenization never changes).
MAX_TOKENIZED = 50_000
#: The temporary `fts5vocab` tables every store connection gets (`vocab_tables_sql`): every
#: instance of a term, and each term's row count.
VOCAB_TABLE = "temp.memoryd_fts_vocab"
ROWS_TABLE = "temp.memoryd_fts_rows"
#: A query whose terms not yet held add up to more postings than this share of MAX_POSTINGS
#: is left to FTS5: loading them would push out what other queries use.
LOAD_SHARE = 4

#: FTS5's averages (id 1) and structure (id 10) records, and the first and last row: a state.
_STATE_SQL = (
    "select id, block from chunks_fts_data where id in (1, 10) "
    "union all select -1, (select min(id) || ' ' || max(id) from chunks_fts_docsize) "
    "order by id"
)


def or_phrases(match: str) -> list[str] | None:
    """The phrases of a MATCH string that is exactly `"a" OR "b" …` (what the index builds for
    word terms), else None (any other form is FTS5's to answer)."""
    phrases: list[str] = []
    i, n = 0, len(match)
    while i < n:
        if match[i] != '"':
            return None
        j, text = i + 1, []
        while True:
            k = match.find('"', j)
            if k < 0:
                return None
            text.append(match[j:k])
            if match.startswith('""', k):
                text.append('"')
                j = k + 2
                continue
            break
        phrases.append("".join(text))
        i = k + 1
        if i < n:
            if not match.startswith(" OR ", i):
                return None
            i += 4
            if i >= n:
                return None
    return phrases or None


def vocab_tables_sql(fts_table: str) -> list[str]:
    """The statements a store runs on each new connection (before `query_only`)."""
    return [
        f"create virtual table if not exists {VOCAB_TABLE} "
        f"using fts5vocab(main, {fts_table}, instance)",
        f"create virtual table if not exists {ROWS_TABLE} using fts5vocab(main, {fts_table}, row)",
    ]


def _varints(blob: bytes) -> list[int]:
    """SQLite's varints (big-endian 7-bit groups; a 9th byte carries 8 bits), all of `blob`."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


class _State:
    """The rows' token counts and the corpus figures of one index state."""

    __slots__ = ("avgdl", "ids", "lengths", "rows")

    def __init__(self, ids: I64, lengths: F64, rows: int, tokens: int) -> None:
        self.ids = ids
        self.lengths = lengths
        self.rows = rows
        self.avgdl = float(tokens) / float(rows) if rows else 0.0


class Postings:
    """In-memory bm25 for one store's FTS5 table; thread-safe (one lock, short holds)."""

    def __init__(self, tokenizer: str, connect: Callable[[], Any]) -> None:
        self._tokenizer = tokenizer
        self._connect = connect
        self._lock = threading.Lock()
        self._tok_conn: Any = None
        self._tokens: dict[str, tuple[str, ...]] = {}
        self._key: tuple[tuple[int, bytes], ...] | None = None
        self._state: _State | None = None
        self._lists: OrderedDict[str, tuple[I32, F32]] = OrderedDict()
        self._held = 0

    # ------------------------------------------------------------------ tokens

    def _tokenize(self, terms: Sequence[str]) -> list[tuple[str, ...]]:
        missing = [t for t in dict.fromkeys(terms) if t not in self._tokens]
        if missing:
            conn = self._tok_conn
            if conn is None:
                conn = self._tok_conn = self._connect()
                conn.execute(
                    f"create virtual table q using fts5(x, tokenize = '{self._tokenizer}')"
                )
                conn.execute("create virtual table qv using fts5vocab(q, instance)")
            conn.execute("delete from q")
            conn.executemany(
                "insert into q(rowid, x) values (?, ?)",
                [(i + 1, t) for i, t in enumerate(missing)],
            )
            found: dict[int, list[str]] = {}
            for doc, term in conn.execute("select doc, term from qv order by doc, offset"):
                found.setdefault(int(doc), []).append(str(term))
            if len(self._tokens) + len(missing) > MAX_TOKENIZED:
                self._tokens.clear()
            for i, t in enumerate(missing):
                self._tokens[t] = tuple(found.get(i + 1, ()))
        return [self._tokens[t] for t in terms]

    # ------------------------------------------------------------------ index state

    def _load_state(self, conn: Any, averages: bytes) -> _State:
        import numpy as np

        ids: list[int] = []
        lengths: list[int] = []
        for rowid, size in conn.execute("select id, sz from chunks_fts_docsize order by id"):
            ids.append(int(rowid))
            lengths.append(_varints(bytes(size))[0])  # one column: one count
        figures = _varints(averages)
        rows, tokens = figures[0], (figures[1] if len(figures) > 1 else 0)
        return _State(
            np.asarray(ids, dtype=np.int64), np.asarray(lengths, dtype=np.float64), rows, tokens
        )

    def _postings(self, conn: Any, state: _State, token: str) -> tuple[I32, F32]:
        import numpy as np

        held = self._lists.get(token)
        if held is not None:
            self._lists.move_to_end(token)
            return held
        docs = np.fromiter(
            (r[0] for r in conn.execute(f"select doc from {VOCAB_TABLE} where term = ?", (token,))),
            dtype=np.int64,
        )
        rows, counts = np.unique(docs, return_counts=True)
        entry = (np.searchsorted(state.ids, rows).astype(np.int32), counts.astype(np.float32))
        self._lists[token] = entry
        self._held += len(rows)
        while self._held > MAX_POSTINGS and len(self._lists) > 1:
            _, (old, _) = self._lists.popitem(last=False)
            self._held -= len(old)
        return entry

    # ------------------------------------------------------------------ search

    def top(self, conn: Any, terms: Sequence[str], limit: int) -> list[tuple[int, float]] | None:
        """(rowid, bm25 strength) best first, as `bm25()` over the OR of `terms` ranks them; None
        when FTS5 should answer (a phrase among the terms, or the first search at this state)."""
        if not terms or limit <= 0 or any(has_cjk(t) for t in terms):
            return None
        with self._lock:
            key = tuple(
                (int(i), bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode())
                for i, v in conn.execute(_STATE_SQL).fetchall()
            )
            if key != self._key:
                self._key, self._state = key, None
                self._lists.clear()
                self._held = 0
                return None  # a one-off search never pays for the load
            tokens = self._tokenize(terms)
            if any(len(t) != 1 for t in tokens):
                return None
            words = [t[0] for t in tokens]
            if self._too_much_to_load(conn, words):
                return None
            state = self._state
            if state is None:
                averages = next((block for i, block in key if i == 1), b"")
                state = self._state = self._load_state(conn, averages)
            return self._score(conn, state, words, limit)

    def _too_much_to_load(self, conn: Any, tokens: list[str]) -> bool:
        missing = [t for t in dict.fromkeys(tokens) if t not in self._lists]
        if not missing:
            return False
        marks = ",".join("?" * len(missing))
        (total,) = conn.execute(
            f"select coalesce(sum(doc), 0) from {ROWS_TABLE} where term in ({marks})", missing
        ).fetchone()
        return int(total) > MAX_POSTINGS // LOAD_SHARE

    def _score(
        self, conn: Any, state: _State, tokens: list[str], limit: int
    ) -> list[tuple[int, float]]:
        import numpy as np

        n = state.rows
        if n == 0 or len(state.ids) == 0:
            return []
        scores = np.zeros(len(state.ids), dtype=np.float64)
        norm = 1 - B
        for token in tokens:
            pos, counts = self._postings(conn, state, token)
            hits = len(pos)
            if not hits:
                continue
            idf = math.log((n - hits + 0.5) / (hits + 0.5))
            if idf <= 0.0:
                idf = 1e-6
            freq = counts.astype(np.float64)  # FTS5 counts in doubles
            length = state.lengths[pos]
            scores[pos] += idf * (
                (freq * (K1 + 1.0)) / (freq + K1 * (norm + B * length / state.avgdl))
            )
        found = np.flatnonzero(scores > 0.0)
        if len(found) > limit:
            kth = np.partition(scores[found], len(found) - limit)[len(found) - limit]
            found = found[scores[found] >= kth]
        order = np.lexsort((state.ids[found], -scores[found]))[:limit]
        best = found[order]
        return [(int(state.ids[i]), float(scores[i])) for i in best]
