"""FTS5's own `bm25()` top-k, computed from postings held in memory by a long-lived process.

FTS5 answers an OR of terms by scoring every row that matches any of them: a row's score is the
sum, in the query's term order, of each term's share, which is FTS5's `bm25()` of that term
alone on the row. Each term's shares (row, share) are read once from FTS5 and kept in numpy
arrays; a query adds them up.

**Exact.** The shares are FTS5's own numbers, added in its order, and ties go by rowid as FTS5's
scan leaves them; query terms are tokenized by FTS5 itself. A term that is not exactly one token
(a phrase: `wind-tunnel`, CJK runs) is left to FTS5: `top` answers None and the caller runs the
SQL (`tests/test_postings.py` compares the two).

**Never stale.** Everything is keyed by FTS5's structure and averages records, read in the same
snapshot as the postings: any write to the keyword index, by any process, drops what was held.

**Paid for only where it pays.** The first search at an index state goes to FTS5, so a one-off
CLI search never builds any of it; later ones load postings per term as queries use them, up to
MAX_POSTINGS, least recently used first out.

**Bounded as the index grows.** A term in more than 1/COMMON_SHARE of the rows (its postings
grow with the index; its bm25 weight shrinks) is not scored on every row it holds when the query
has rarer terms: those pick the candidates, the common terms' exact shares are added to the few
candidates that could still reach the top (from the held postings, or from FTS5 when they are
too many to load), and the answer stands only when no row outside them could beat the last one
kept, even holding every common term at its highest possible score (MaxScore). Else every row
is scored, or FTS5 answers. Either way the rows and scores are bm25's own.
"""

from __future__ import annotations

import json
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
#: Postings held at most (row index int32 + share float64: 12 bytes each, 48 MB).
MAX_POSTINGS = 4_000_000
#: Query terms whose tokens are remembered (their tokenization never changes).
MAX_TOKENIZED = 50_000
#: The temporary `fts5vocab` table every store connection gets (`vocab_tables_sql`): each
#: term's row count.
ROWS_TABLE = "temp.memoryd_fts_rows"
#: A query whose terms not yet held add up to more postings than this share of MAX_POSTINGS
#: is left to FTS5: loading them would push out what other queries use.
LOAD_SHARE = 4
#: A term in more rows than 1/COMMON_SHARE of them is scored only on the rows the rarer terms
#: pick (the module docstring), when there are rarer terms.
COMMON_SHARE = 10

#: FTS5's averages (id 1) and structure (id 10) records, and the first and last row: a state.
#: min() and max() each alone in its own query: SQLite then reads one end of the table, where
#: `min(id) || max(id)` in one query reads every row.
_STATE_SQL = (
    "select id, block from chunks_fts_data where id in (1, 10) "
    "union all select -1, (select min(id) from chunks_fts_docsize) || ' ' || "
    "(select max(id) from chunks_fts_docsize) "
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
        f"create virtual table if not exists {ROWS_TABLE} using fts5vocab(main, {fts_table}, row)"
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
    """The rows' ids and the row count bm25 weighs terms by, of one index state."""

    __slots__ = ("ids", "rows")

    def __init__(self, ids: I64, rows: int) -> None:
        self.ids = ids
        self.rows = rows


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
        self._lists: OrderedDict[str, tuple[I32, F64]] = OrderedDict()
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

        ids = np.fromiter(
            (r[0] for r in conn.execute("select id from chunks_fts_docsize order by id")),
            dtype=np.int64,
        )
        return _State(ids, _varints(averages)[0])

    def _postings(self, conn: Any, state: _State, token: str, term: str) -> tuple[I32, F64]:
        """The rows holding `token` (indexes into state.ids, ascending) and its share of bm25
        on each; `term` is a query term FTS5 tokenizes into `token` alone."""
        import numpy as np

        held = self._lists.get(token)
        if held is not None:
            self._lists.move_to_end(token)
            return held
        found = conn.execute(
            "select rowid, bm25(chunks_fts) from chunks_fts where chunks_fts match ?",
            (_phrase(term),),
        ).fetchall()
        rowids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        shares = -np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))
        order = np.argsort(rowids, kind="stable")
        entry = (np.searchsorted(state.ids, rowids[order]).astype(np.int32), shares[order])
        self._lists[token] = entry
        self._held += len(rowids)
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
            state = self._state
            if state is None:
                averages = next((block for i, block in key if i == 1), b"")
                state = self._state = self._load_state(conn, averages)
            rows = self._row_counts(conn, words)
            common = {w for w in words if rows[w] * COMMON_SHARE > state.rows}
            rare = [w for w in words if w not in common]
            bounded = bool(common and rare) and not self._too_much_to_load(rows, rare)
            if bounded and all(w in self._lists for w in common):
                pruned = self._score_pruned(conn, state, terms, words, rows, common, limit)
                if pruned is not None:
                    return pruned
            if not self._too_much_to_load(rows, words):
                return self._score(conn, state, terms, words, limit)
            # too much to load: the rarer terms may still vouch for the answer
            if bounded:
                return self._score_pruned(conn, state, terms, words, rows, common, limit)
            return None

    def _row_counts(self, conn: Any, tokens: list[str]) -> dict[str, int]:
        """How many rows hold each token (held ones from their postings)."""
        out = {t: len(self._lists[t][0]) for t in tokens if t in self._lists}
        missing = [t for t in dict.fromkeys(tokens) if t not in out]
        if missing:
            marks = ",".join("?" * len(missing))
            found = dict(
                conn.execute(
                    f"select term, doc from {ROWS_TABLE} where term in ({marks})", missing
                ).fetchall()
            )
            out.update((t, int(found.get(t, 0))) for t in missing)
        return out

    def _too_much_to_load(self, rows: dict[str, int], tokens: list[str]) -> bool:
        missing = [t for t in dict.fromkeys(tokens) if t not in self._lists]
        return sum(rows[t] for t in missing) > MAX_POSTINGS // LOAD_SHARE

    def _score(
        self, conn: Any, state: _State, terms: Sequence[str], tokens: list[str], limit: int
    ) -> list[tuple[int, float]]:
        import numpy as np

        if state.rows == 0 or len(state.ids) == 0:
            return []
        scores = np.zeros(len(state.ids), dtype=np.float64)
        for term, token in zip(terms, tokens, strict=True):
            pos, shares = self._postings(conn, state, token, term)
            scores[pos] += shares
        found = np.flatnonzero(scores > 0.0)
        return _best(state, found, scores[found], limit)

    def _score_pruned(
        self,
        conn: Any,
        state: _State,
        terms: Sequence[str],
        tokens: list[str],
        rows: dict[str, int],
        common: set[str],
        limit: int,
    ) -> list[tuple[int, float]] | None:
        """`_score`'s answer without loading the `common` tokens' postings, or None when the
        rarer tokens cannot vouch for it (the module docstring)."""
        import numpy as np

        if state.rows == 0 or len(state.ids) == 0:
            return None
        held = {
            token: self._postings(conn, state, token, term)
            for term, token in zip(terms, tokens, strict=True)
            if token not in common
        }
        rare = np.zeros(len(state.ids), dtype=np.float64)
        for token in tokens:
            if token not in common:
                pos, shares = held[token]
                rare[pos] += shares
        picked = np.flatnonzero(rare > 0.0)
        if len(picked) < limit:
            return None
        # the most the common tokens add to any row (tf -> infinity), with room for rounding
        ceiling = sum(_idf(state.rows, rows[t]) * (K1 + 1.0) for t in tokens if t in common)
        ceiling = ceiling * (1 + 1e-9) + 1e-12
        kth = np.partition(rare[picked], len(picked) - limit)[len(picked) - limit]
        if ceiling >= kth:
            return None  # a row the rarer tokens did not pick could still make the cut
        contenders = picked[rare[picked] + ceiling >= kth]
        parts = {
            t: self._held_parts(t, contenders)
            if t in self._lists
            else self._fts_parts(conn, state, terms[tokens.index(t)], contenders)
            for t in common
        }
        # summed in the query's term order, as FTS5 does: the same floating-point result
        scores = np.zeros(len(contenders), dtype=np.float64)
        for token in tokens:
            if token in common:
                scores += parts[token]
                continue
            pos, shares = held[token]
            if not len(pos):
                continue
            at = np.minimum(np.searchsorted(pos, contenders), len(pos) - 1)
            has = pos[at] == contenders
            scores[has] += shares[at[has]]
        return _best(state, contenders, scores, limit)

    def _held_parts(self, token: str, rows: I64) -> F64:
        """A held token's share of bm25 on each of `rows` (0 where absent)."""
        import numpy as np

        pos, shares = self._lists[token]
        out = np.zeros(len(rows), dtype=np.float64)
        if len(pos):
            at = np.minimum(np.searchsorted(pos, rows), len(pos) - 1)
            has = pos[at] == rows
            out[has] = shares[at[has]]
        return out

    @staticmethod
    def _fts_parts(conn: Any, state: _State, term: str, rows: I64) -> F64:
        """FTS5's own bm25 of the one-term query `term` on each of `rows` (0 where absent)."""
        import numpy as np

        out = np.zeros(len(rows), dtype=np.float64)
        ids = state.ids[rows]
        where = {int(rowid): i for i, rowid in enumerate(ids)}
        # `+rowid`: one scan of the term's rows; a lookup per rowid would make FTS5 count the
        # term's rows again for each one
        for rowid, score in conn.execute(
            "select rowid, bm25(chunks_fts) from chunks_fts where chunks_fts match ? "
            "and +rowid in (select value from json_each(?))",
            (_phrase(term), json.dumps([int(x) for x in ids])),
        ):
            out[where[int(rowid)]] = -float(score)
        return out


def _idf(rows: int, hits: int) -> float:
    idf = math.log((rows - hits + 0.5) / (hits + 0.5))
    return 1e-6 if idf <= 0.0 else idf


def _phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _best(state: _State, rows: I64, scores: F64, limit: int) -> list[tuple[int, float]]:
    """The `limit` best of `rows` (indexes into state.ids) by score, ties by rowid."""
    import numpy as np

    if len(rows) > limit:
        kth = np.partition(scores, len(rows) - limit)[len(rows) - limit]
        keep = scores >= kth
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((state.ids[rows], -scores))[:limit]
    return [(int(state.ids[rows[i]]), float(scores[i])) for i in order]
