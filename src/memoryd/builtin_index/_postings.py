"""FTS5's own `bm25()` top-k from postings a long-lived process holds, with common terms bounded
by MaxScore (docs/builtin-index.md); every answer is FTS5's rows, order and scores."""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.text import fts_or, has_cjk

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    F64 = npt.NDArray[np.float64]
    I32 = npt.NDArray[np.int32]
    I64 = npt.NDArray[np.int64]

#: FTS5's bm25() k1 (fts5_aux.c).
K1 = 1.2
#: Postings held at most (row index int32 + share float64: 12 bytes each, 48 MB).
MAX_POSTINGS = 4_000_000
#: Query terms whose tokens are remembered (their tokenization never changes).
MAX_TOKENIZED = 50_000
#: The temporary `fts5vocab` table of each term's row count on every store connection.
ROWS_TABLE = "temp.memoryd_fts_rows"
#: A query whose terms not yet held add up to more postings than this share of MAX_POSTINGS
#: is left to FTS5: loading them would push out what other queries use.
LOAD_SHARE = 4
#: A term in more rows than 1/COMMON_SHARE of them is scored only on the rarer terms' picks.
COMMON_SHARE = 10

#: FTS5's averages (id 1) and structure (id 10) records and the first and last row: a state
#: (min and max in queries of their own: together, SQLite reads every row).
_STATE_SQL = (
    "select id, block from chunks_fts_data where id in (1, 10) "
    "union all select -1, (select min(id) from chunks_fts_docsize) || ' ' || "
    "(select max(id) from chunks_fts_docsize) "
    "order by id"
)
#: Patterns, not compiled here: `re` compiles them on first use, off a one-off CLI's import path.
_PHRASE = r'"((?:[^"]|"")*)"'
_OR_PHRASES = r'"(?:[^"]|"")*"(?: OR "(?:[^"]|"")*")*'


def or_phrases(match: str) -> list[str] | None:
    """The phrases of a MATCH string that is exactly `"a" OR "b" …` (what the index builds for
    word terms), else None (any other form is FTS5's to answer)."""
    if not re.fullmatch(_OR_PHRASES, match):
        return None
    return [p.replace('""', '"') for p in re.findall(_PHRASE, match)]


def vocab_tables_sql(fts_table: str) -> list[str]:
    """The statements a store runs on each new connection (before `query_only`)."""
    return [
        f"create virtual table if not exists {ROWS_TABLE} using fts5vocab(main, {fts_table}, row)"
    ]


def _row_count(averages: bytes) -> int:
    """The first varint of FTS5's averages record: the row count (SQLite's varints: big-endian
    7-bit groups, a 9th byte carrying 8 bits)."""
    value = 0
    for j, byte in enumerate(averages[:9]):
        if j == 8:
            return (value << 8) | byte
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            break
    return value


class Postings:
    """In-memory bm25 for one store's FTS5 table; thread-safe (one lock, short holds)."""

    def __init__(self, tokenizer: str, connect: Callable[[], Any]) -> None:
        self._tokenizer = tokenizer
        self._connect = connect
        self._lock = threading.Lock()
        self._tok_conn: Any = None
        self._tokens: dict[str, tuple[str, ...]] = {}
        self._key: tuple[tuple[int, bytes], ...] | None = None
        #: The rows' ids at this state, ascending (postings hold indexes into it).
        self._ids: I64 | None = None
        self._lists: OrderedDict[str, tuple[I32, F64]] = OrderedDict()
        self._held = 0
        #: Each token's row count at this state (`_row_counts`).
        self._counts: dict[str, int] = {}

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
                "insert into q(rowid, x) values (?, ?)", [(i + 1, t) for i, t in enumerate(missing)]
            )
            found: dict[int, list[str]] = {}
            for doc, term in conn.execute("select doc, term from qv order by doc, offset"):
                found.setdefault(int(doc), []).append(str(term))
            if len(self._tokens) + len(missing) > MAX_TOKENIZED:
                self._tokens.clear()
            for i, t in enumerate(missing):
                self._tokens[t] = tuple(found.get(i + 1, ()))
        return [self._tokens[t] for t in terms]

    def _postings(self, conn: Any, ids: I64, token: str, term: str) -> tuple[I32, F64]:
        """The rows holding `token` (indexes into `ids`, ascending) and its share of bm25
        on each; `term` is a query term FTS5 tokenizes into `token` alone."""
        import numpy as np

        held = self._lists.get(token)
        if held is not None:
            self._lists.move_to_end(token)
            return held
        found = conn.execute(
            "select rowid, bm25(chunks_fts) from chunks_fts where chunks_fts match ?",
            (fts_or([term]),),
        ).fetchall()
        rowids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
        shares = -np.fromiter((r[1] for r in found), dtype=np.float64, count=len(found))
        order = np.argsort(rowids, kind="stable")
        entry = (np.searchsorted(ids, rowids[order]).astype(np.int32), shares[order])
        self._lists[token] = entry
        self._held += len(rowids)
        while self._held > MAX_POSTINGS and len(self._lists) > 1:
            _, (old, _) = self._lists.popitem(last=False)
            self._held -= len(old)
        return entry

    def top(self, conn: Any, terms: Sequence[str], limit: int) -> list[tuple[int, float]] | None:
        """(rowid, bm25 strength) best first, as `bm25()` over the OR of `terms` ranks them; None
        when FTS5 should answer the whole query (a phrase among the terms, or a first search at
        this state that the rarer terms cannot vouch for)."""
        if not terms or limit <= 0 or any(has_cjk(t) for t in terms):
            return None
        with self._lock:
            key = _state_key(conn)
            tokens = self._tokenize(terms)
            if any(len(t) != 1 for t in tokens):
                return None
            words = [t[0] for t in tokens]
            total = _row_count(next((block for i, block in key if i == 1), b""))
            fresh = key != self._key
            if fresh:
                self._key, self._ids = key, None
                self._lists.clear()
                self._counts.clear()
                self._held = 0
            rows = self._row_counts(conn, words)
            common = {w for w in words if rows[w] * COMMON_SHARE > total}
            if fresh:  # a one-off search never pays for the load
                return self._fts_pruned(conn, terms, words, rows, common, total, limit)
            if self._ids is None:
                import numpy as np  # only here: a one-off search never loads it

                cur = conn.execute("select id from chunks_fts_docsize order by id")
                self._ids = np.fromiter((r[0] for r in cur), dtype=np.int64)
            ids = self._ids
            if total == 0 or len(ids) == 0:
                return []
            rare = [w for w in words if w not in common]
            bounded = bool(common and rare) and not self._too_much_to_load(rows, rare)
            if bounded and all(w in self._lists for w in common):
                pruned = self._score_pruned(conn, ids, total, terms, words, rows, common, limit)
                if pruned is not None:
                    return pruned
            if not self._too_much_to_load(rows, words):
                return self._score(conn, ids, terms, words, limit)
            # too much to load: the rarer terms may still vouch for the answer
            if bounded:
                return self._score_pruned(conn, ids, total, terms, words, rows, common, limit)
            return None

    def _fts_pruned(
        self,
        conn: Any,
        terms: Sequence[str],
        tokens: list[str],
        rows: dict[str, int],
        common: set[str],
        total: int,
        limit: int,
    ) -> list[tuple[int, float]] | None:
        """FTS5's own answer, its bm25 of the whole query asked only on the rows the rarer terms
        pick (`_contenders`); None when no term is common or the rarer ones cannot vouch for it."""
        rare = [t for t, w in zip(terms, tokens, strict=True) if w not in common]
        if not common or not rare or sum(rows[w] for w in set(tokens) - common) < limit:
            return None
        found = conn.execute(
            "select rowid, bm25(chunks_fts) from chunks_fts where chunks_fts match ?",
            (fts_or(rare),),
        ).fetchall()
        picked = _contenders([-s for _, s in found], _ceiling(total, rows, tokens, common), limit)
        if picked is None:
            return None
        kinds = [w in common for w in tokens]
        if kinds not in (sorted(kinds), sorted(kinds, reverse=True)):
            return _best_of(conn, terms, [found[i][0] for i in picked], limit)
        # the common terms all before or after the rarer ones: `(a OR b) AND (c OR d)` keeps the
        # query's phrases in order, so FTS5 scores only the rows holding both kinds the whole
        # query's way; a row holding only rarer terms already has that score (the rest add 0.0)
        both = [fts_or(rare), fts_or([t for t, c in zip(terms, kinds, strict=True) if c])]
        scores = {rowid: -s for rowid, s in found}
        for rowid, s in conn.execute(
            "select rowid, bm25(chunks_fts) from chunks_fts where chunks_fts match ?",
            ("({}) AND ({})".format(*both[:: 1 if kinds[-1] else -1]),),
        ):
            scores[rowid] = -s
        best = sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:limit]
        return [(int(rowid), float(s)) for rowid, s in best]

    def count(self, conn: Any, term: str) -> int | None:
        """How many rows hold `term`, when FTS5 reads it as one token and a search at this
        state counted it already; else None (FTS5 counts)."""
        if has_cjk(term):
            return None
        with self._lock:
            (tokens,) = self._tokenize([term])
            if len(tokens) != 1 or tokens[0] not in self._counts or _state_key(conn) != self._key:
                return None
            return self._counts[tokens[0]]

    def _row_counts(self, conn: Any, tokens: list[str]) -> dict[str, int]:
        """How many rows hold each token (remembered for this state)."""
        missing = [t for t in dict.fromkeys(tokens) if t not in self._counts]
        if missing:
            if len(self._counts) + len(missing) > MAX_TOKENIZED:
                self._counts.clear()
                missing = list(dict.fromkeys(tokens))
            marks = ",".join("?" * len(missing))
            sql = f"select term, doc from {ROWS_TABLE} where term in ({marks})"
            found = dict(conn.execute(sql, missing).fetchall())
            self._counts.update((t, int(found.get(t, 0))) for t in missing)
        return {t: self._counts[t] for t in tokens}

    def _too_much_to_load(self, rows: dict[str, int], tokens: list[str]) -> bool:
        missing = [t for t in dict.fromkeys(tokens) if t not in self._lists]
        return sum(rows[t] for t in missing) > MAX_POSTINGS // LOAD_SHARE

    def _score(
        self, conn: Any, ids: I64, terms: Sequence[str], tokens: list[str], limit: int
    ) -> list[tuple[int, float]]:
        import numpy as np

        scores = np.zeros(len(ids), dtype=np.float64)
        for term, token in zip(terms, tokens, strict=True):
            pos, shares = self._postings(conn, ids, token, term)
            scores[pos] += shares
        found = np.flatnonzero(scores > 0.0)
        return _best(ids, found, scores[found], limit)

    def _score_pruned(
        self,
        conn: Any,
        ids: I64,
        total: int,
        terms: Sequence[str],
        tokens: list[str],
        rows: dict[str, int],
        common: set[str],
        limit: int,
    ) -> list[tuple[int, float]] | None:
        """`_score`'s answer without loading the `common` tokens' postings, or None when the
        rarer tokens cannot vouch for it (`_contenders`)."""
        import numpy as np

        held = {
            token: self._postings(conn, ids, token, term)
            for term, token in zip(terms, tokens, strict=True)
            if token not in common
        }
        rare = np.zeros(len(ids), dtype=np.float64)
        for token in tokens:
            if token not in common:
                pos, shares = held[token]
                rare[pos] += shares
        picked = np.flatnonzero(rare > 0.0)
        ceiling = _ceiling(total, rows, tokens, common)
        chosen = _contenders(rare[picked].tolist(), ceiling, limit)
        if chosen is None:
            return None
        contenders = picked[chosen]
        if not all(t in self._lists for t in common):
            return _best_of(conn, terms, ids[contenders].tolist(), limit)
        # summed in the query's term order, as FTS5 does: the same floating-point result
        scores = np.zeros(len(contenders), dtype=np.float64)
        for token in tokens:
            scores += _parts(*(self._lists[token] if token in common else held[token]), contenders)
        return _best(ids, contenders, scores, limit)


def _contenders(scores: list[float], ceiling: float, limit: int) -> list[int] | None:
    """MaxScore: the rows (indexes into `scores`, the rarer terms' bm25 on each row they hold)
    that can be among the best `limit` once the common terms add at most `ceiling` to a row;
    None when a row the rarer terms do not hold could be too."""
    if len(scores) < limit:
        return None
    kth = sorted(scores, reverse=True)[limit - 1]
    ceiling = ceiling * (1 + 1e-9) + 1e-12  # room for rounding
    if ceiling >= kth:
        return None
    return [i for i, s in enumerate(scores) if s + ceiling >= kth]


def _ceiling(total: int, rows: dict[str, int], tokens: list[str], common: set[str]) -> float:
    """The most the `common` tokens add to any row's bm25 (each one's tf -> infinity), by
    FTS5's idf (floored at 1e-6; here from above, as a bound may be)."""
    idf = {t: math.log((total - rows[t] + 0.5) / (rows[t] + 0.5)) for t in common}
    return sum(max(idf[t], 1e-6) * (K1 + 1.0) for t in tokens if t in common)


def _best_of(
    conn: Any, terms: Sequence[str], rowids: list[int], limit: int
) -> list[tuple[int, float]]:
    """FTS5's own best `limit` of `rowids` for the OR of `terms`."""
    # `+rowid`: one scan of the query's rows; a lookup per rowid would make FTS5 count each
    # term's rows again for each one
    found = conn.execute(
        "select rowid, bm25(chunks_fts) as r from chunks_fts where chunks_fts match ? "
        "and +rowid in (select value from json_each(?)) order by r limit ?",
        (fts_or(terms), json.dumps(rowids), limit),
    )
    return [(int(r), -float(s)) for r, s in found]


def _state_key(conn: Any) -> tuple[tuple[int, bytes], ...]:
    return tuple(
        (int(i), bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode())
        for i, v in conn.execute(_STATE_SQL).fetchall()
    )


def _parts(pos: I32, shares: F64, rows: I64) -> F64:
    """A token's share of bm25 on each of `rows` (0 where absent), from its postings."""
    import numpy as np

    out = np.zeros(len(rows), dtype=np.float64)
    if len(pos):
        at = np.minimum(np.searchsorted(pos, rows), len(pos) - 1)
        has = pos[at] == rows
        out[has] = shares[at[has]]
    return out


def _best(ids: I64, rows: I64, scores: F64, limit: int) -> list[tuple[int, float]]:
    """The `limit` best of `rows` (indexes into `ids`) by score, ties by rowid."""
    import numpy as np

    if len(rows) > limit:
        kth = np.partition(scores, len(rows) - limit)[len(rows) - limit]
        keep = scores >= kth
        rows, scores = rows[keep], scores[keep]
    order = np.lexsort((ids[rows], -scores))[:limit]
    return [(int(ids[rows[i]]), float(scores[i])) for i in order]
