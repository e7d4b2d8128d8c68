"""Keyword search from postings held in memory (`builtin_index._postings`): the rows and the
scores FTS5's `bm25()` gives, to the last bit, over generated corpora and queries; never stale
after a write, from this process or another; phrases and first searches left to FTS5."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import agent_for, index_for, write
from memoryd.builtin_index import MemoryIndex, _postings
from memoryd.builtin_index._postings import Postings, or_phrases, vocab_tables_sql
from memoryd.builtin_index._store import FTS_TOKENIZER, Store, _binding
from memoryd.core.text import fts_match_expression

SQL = (
    "select rowid, bm25(chunks_fts) as r from chunks_fts where chunks_fts match ? "
    "order by r limit ?"
)

#: Words with stems in common, diacritics, digits, a word in every row (IDF clamped).
VOCAB = [
    "run",
    "running",
    "runs",
    "ran",
    "runner",
    "pelican",
    "harbour",
    "ferry",
    "café",
    "naïve",
    "résumé",
    "budget",
    "budgets",
    "meeting",
    "meetings",
    "deploy",
    "deployed",
    "2026",
    "16.4",
    "alpha",
    "beta",
    "gamma",
    "delta",
    "flow",
    "flows",
    "flowing",
    "tunnel",
    "wind",
    "body",
    "bodies",
    "heat",
    "transfer",
    "blunt",
    "vorticity",
    "über",
    "straße",
]


def _memory_db() -> Any:
    module, _ = _binding()
    return module.connect(":memory:", check_same_thread=False, isolation_level=None)


def _corpus(path: Path, rng: random.Random, rows: int) -> Any:
    module, _ = _binding()
    conn = module.connect(str(path), isolation_level=None)
    conn.execute(f"create virtual table chunks_fts using fts5(body, tokenize = '{FTS_TOKENIZER}')")
    for statement in vocab_tables_sql("chunks_fts"):
        conn.execute(statement)
    weights = [1 / (i + 1) for i in range(len(VOCAB))]  # Zipf-like: a few words everywhere
    conn.execute("begin")
    ids = rng.sample(range(1, rows * 5), rows)  # rowids with gaps, inserted out of order
    for i, rowid in enumerate(ids):
        if i % 7 == 3:  # identical rows: ties, broken by rowid
            body = "pelican budget meeting"
        else:
            body = " ".join(rng.choices(VOCAB, weights, k=rng.randint(1, 60)))
            body += " common"
        conn.execute("insert into chunks_fts(rowid, body) values (?, ?)", (rowid, body))
    conn.execute("commit")
    return conn


def _sql(conn: Any, terms: list[str], limit: int) -> list[tuple[int, float]]:
    match = fts_match_expression(terms)
    return [(int(r[0]), -float(r[1])) for r in conn.execute(SQL, (match, limit))]


@pytest.mark.parametrize("seed", range(6))
def test_held_postings_give_fts5s_rows_and_scores_exactly(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    conn = _corpus(tmp_path / "c.sqlite", rng, rows=rng.choice([3, 40, 400, 1500]))
    postings = Postings(FTS_TOKENIZER, _memory_db)
    assert postings.top(conn, ["pelican"], 10) is None  # the first search at a state: FTS5's
    queries = [
        rng.sample([*VOCAB, "common", "absent", "zzz"], rng.randint(1, 12)) for _ in range(60)
    ]
    queries += [["common"], ["run", "running", "runs"], ["pelican", "pelican"], ["absent"]]
    answered = 0
    for terms in queries:
        for limit in (1, 6, 24, 500):
            held = postings.top(conn, terms, limit)
            if held is None:  # a term FTS5 tokenizes into several tokens (e.g. `16.4`)
                assert any(len(t) != 1 for t in postings._tokenize(terms)), terms
                continue
            answered += 1
            assert held == _sql(conn, terms, limit), (terms, limit)  # == on the floats
    assert answered > 200


def test_phrases_and_cjk_are_left_to_fts5(tmp_path: Path) -> None:
    conn = _corpus(tmp_path / "c.sqlite", random.Random(1), rows=50)
    postings = Postings(FTS_TOKENIZER, _memory_db)
    postings.top(conn, ["pelican"], 5)
    assert postings.top(conn, ["pelican"], 5) is not None
    for terms in (["wind-tunnel"], ["don't", "pelican"], ["预算"], [""], []):
        assert postings.top(conn, terms, 5) is None, terms


def test_a_write_drops_what_was_held(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    conn = _corpus(path, random.Random(2), rows=200)
    postings = Postings(FTS_TOKENIZER, _memory_db)
    terms = ["pelican", "ferry", "budget"]
    postings.top(conn, terms, 10)
    before = postings.top(conn, terms, 10)
    assert before == _sql(conn, terms, 10)
    # another process adds rows that outrank everything, and deletes the best one
    script = (
        "import sys, sqlite3\n"
        "from memoryd.builtin_index._store import _binding\n"
        "m, _ = _binding(); c = m.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('begin')\n"
        "c.execute(\"insert into chunks_fts(rowid, body) values (999999, 'pelican ferry budget')\")\n"
        f"c.execute('delete from chunks_fts where rowid = {before[0][0]}')\n"
        "c.execute('commit')\n"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)
    assert postings.top(conn, terms, 10) is None  # a new state: FTS5 answers first
    after = postings.top(conn, terms, 10)
    assert after == _sql(conn, terms, 10) != before
    assert after is not None and after[0][0] == 999999
    assert before[0][0] not in {rowid for rowid, _ in after}


def test_a_small_budget_evicts_and_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = 300
    monkeypatch.setattr(_postings, "MAX_POSTINGS", 2 * rows)  # two terms' worth at most
    monkeypatch.setattr(_postings, "LOAD_SHARE", 1)
    conn = _corpus(tmp_path / "c.sqlite", random.Random(3), rows=rows)
    postings = Postings(FTS_TOKENIZER, _memory_db)
    postings.top(conn, ["common"], 5)
    rng = random.Random(4)
    evicted = False
    for _ in range(60):
        terms = rng.sample(VOCAB[:12], 2)
        before = set(postings._lists)
        held = postings.top(conn, terms, 8)
        assert held is not None and held == _sql(conn, terms, 8)
        assert postings._held <= 2 * rows or len(postings._lists) == 1
        evicted |= bool(before - set(postings._lists))
    assert evicted


def test_a_query_that_would_flush_what_is_held_is_left_to_fts5(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn = _corpus(tmp_path / "c.sqlite", random.Random(7), rows=400)
    postings = Postings(FTS_TOKENIZER, _memory_db)
    postings.top(conn, ["pelican"], 5)
    (rows,) = conn.execute("select doc from temp.memoryd_fts_rows where term = 'common'").fetchone()
    monkeypatch.setattr(_postings, "MAX_POSTINGS", 4 * (rows - 1))
    assert postings.top(conn, ["common"], 5) is None  # more than a quarter of the budget
    assert postings._held == 0
    held = postings.top(conn, ["vorticity"], 5)
    assert held is not None and held == _sql(conn, ["vorticity"], 5)


@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5))
def test_or_phrases_reads_back_what_the_index_builds(words: list[str]) -> None:
    match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
    assert or_phrases(match) == words


@pytest.mark.parametrize(
    "match", ['"a" AND "b"', '"a" OR', "a OR b", '"a" "b"', '"unclosed', "", 'NEAR("a" "b")']
)
def test_or_phrases_refuses_any_other_form(match: str) -> None:
    assert or_phrases(match) is None


# --------------------------------------------------------------------------- through the index


def _indexed_notes(workspace: Path, *, seed: int, notes: int, words: int) -> MemoryIndex:
    """A keyword-only index over `notes` daily notes of up to `words` random VOCAB words."""
    rng = random.Random(seed)
    for n in range(notes):
        write(
            workspace / "memory" / f"2026-01-{n % 28 + 1:02d}-{n}.md",
            f"# note {n}\n" + " ".join(rng.choices(VOCAB, k=rng.randint(5, words))) + "\n",
        )
    return index_for(agent_for(workspace), None)


def test_the_index_answers_the_same_from_held_postings_and_follows_edits(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx = _indexed_notes(workspace, seed=5, notes=60, words=80)
    calls: list[bool] = []
    real_top = Postings.top

    def spy(self: Postings, conn: Any, terms: Any, limit: int) -> Any:
        out = real_top(self, conn, terms, limit)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(Postings, "top", spy)

    queries = ["pelican harbour budget", "running ferry", "vorticity of a blunt body", "café"]

    def answers() -> list[list[tuple[str, int, float]]]:
        def run() -> list[list[tuple[str, int, float]]]:
            out = []
            for q in queries:
                found = idx.search(q)
                out.append([(r.path, r.start_line, r.score) for r in found.results])
            return out

        return run()

    first = answers()  # FTS5: the first search at this state, then held postings
    again = answers()
    assert calls[0] is False and all(calls[len(queries) :])
    assert again == first
    write(workspace / "memory" / "2026-02-01.md", "# new\npelican pelican pelican harbour budget\n")
    idx.dirty = True
    edited = answers()
    assert edited[0][0][0] == "memory/2026-02-01.md"
    # and the same as FTS5 alone
    monkeypatch.setattr(idx.store, "_postings", None)
    assert answers() == edited
    idx.close()


def test_fts5_itself_ties_by_rowid(tmp_path: Path) -> None:
    """What `Postings` reproduces for equal scores (checked on this SQLite, in both drivers)."""
    conn = sqlite3.connect(":memory:")
    conn.execute(f"create virtual table chunks_fts using fts5(body, tokenize = '{FTS_TOKENIZER}')")
    order = list(range(1, 80))
    random.Random(6).shuffle(order)
    for rowid in order:
        conn.execute("insert into chunks_fts(rowid, body) values (?, 'same pelican')", (rowid,))
    assert [r[0] for r in conn.execute(SQL, ('"pelican"', 10))] == list(range(1, 11))


def test_a_rebuilt_index_is_not_answered_from_the_old_ones_postings(workspace: Path) -> None:
    """`index --force` publishes a rebuilt file (new chunk ids) into the same path: what was
    held for the old file must not answer for the new one."""
    idx = _indexed_notes(workspace, seed=8, notes=40, words=60)
    store = idx.store
    assert isinstance(store, Store)

    def hits() -> list[tuple[int, float]]:
        return store.keyword_search('"pelican" OR "ferry"', 10)

    def run() -> None:
        idx.sync()
        hits()
        before = hits()  # held postings now
        assert store._postings is not None and store._postings._ids is not None
        held_ids = {rowid for rowid, _ in before}
        for p in sorted((workspace / "memory").iterdir())[:5]:  # renumber: drop, rebuild
            p.unlink()
        idx.sync(force=True)
        hits()
        after = hits()
        postings, store._postings = store._postings, None
        assert after == hits()  # FTS5 alone agrees
        store._postings = postings
        assert {rowid for rowid, _ in after} != held_ids
        idx.close()

    run()


def _common_and_rare_corpus(path: Path, rng: random.Random) -> Any:
    """2,000 rows: 300 rare words, and `common`, `half`, `pelican`, `tenth` in that share of rows."""
    module, _ = _binding()
    conn = module.connect(str(path), isolation_level=None)
    conn.execute(f"create virtual table chunks_fts using fts5(body, tokenize = '{FTS_TOKENIZER}')")
    for statement in vocab_tables_sql("chunks_fts"):
        conn.execute(statement)
    conn.execute("begin")
    for rowid in rng.sample(range(1, 20_000), 2000):
        words = rng.choices(RARE, k=rng.randint(1, 25)) + ["common"] * rng.randint(1, 3)
        words += ["half"] * (rowid % 2) + ["tenth"] * (rowid % 10 == 0) + ["pelican"] * (rowid % 3)
        rng.shuffle(words)
        conn.execute("insert into chunks_fts(rowid, body) values (?, ?)", (rowid, " ".join(words)))
    conn.execute("commit")
    return conn


RARE = [f"w{i}x" for i in range(300)]


def _mixed_queries(rng: random.Random) -> list[list[str]]:
    out = []
    for _ in range(40):
        terms = [*rng.sample(RARE, rng.randint(1, 4)), "common", "half", "pelican", "tenth"]
        terms = rng.sample(terms, rng.randint(2, len(terms)))
        again = rng.sample(["common", "half"], 1)  # a common term twice: two phrases
        out.append(terms + again if rng.random() < 0.5 else again + terms)
    return out


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_common_terms_scored_only_on_the_rarer_terms_rows_give_fts5s_answer(
    tmp_path: Path, seed: int, held: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    conn = _common_and_rare_corpus(tmp_path / "c.sqlite", rng)
    if not held:  # the common words are too many postings to load; the rarer ones are not
        monkeypatch.setattr(_postings, "MAX_POSTINGS", 4000)
    postings = Postings(FTS_TOKENIZER, _memory_db)
    postings.top(conn, ["common"], 10)
    pruned = 0
    score_pruned = Postings._score_pruned

    def counted(self: Postings, *args: Any) -> Any:
        nonlocal pruned
        out = score_pruned(self, *args)
        pruned += out is not None
        return out

    monkeypatch.setattr(Postings, "_score_pruned", counted)
    for terms in _mixed_queries(rng):
        for limit in (1, 6, 24, 5000):
            got = postings.top(conn, terms, limit)
            if got is not None:
                assert got == _sql(conn, terms, limit), (terms, limit)  # == on the floats
    assert pruned > 40
    assert held == ("common" in postings._lists)


@pytest.mark.parametrize("seed", range(3))
def test_a_first_search_asks_fts5_only_about_the_rarer_terms_rows_and_gives_its_answer(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    conn = _common_and_rare_corpus(tmp_path / "c.sqlite", rng)
    pruned = 0
    for terms in _mixed_queries(rng):
        for limit in (1, 6, 24, 5000):
            got = Postings(FTS_TOKENIZER, _memory_db).top(conn, terms, limit)  # a one-off's
            if got is not None:
                pruned += 1
                assert got == _sql(conn, terms, limit), (terms, limit)  # == on the floats
    assert pruned > 40


@pytest.mark.parametrize("seed", range(3))
def test_a_first_search_the_rarer_terms_cannot_vouch_for_is_left_to_fts5(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    conn = _corpus(tmp_path / "c.sqlite", rng, rows=rng.choice([40, 400, 1500]))
    declined = 0
    for _ in range(60):
        terms = rng.sample([*VOCAB, "common", "absent"], rng.randint(1, 8))
        for limit in (1, 6, 24):
            got = Postings(FTS_TOKENIZER, _memory_db).top(conn, terms, limit)
            declined += got is None
            assert got is None or got == _sql(conn, terms, limit), (terms, limit)
    assert declined > 60  # Zipf-like words: a word in every row, few rows with no common word


def test_row_counts_a_search_read_answer_fts5s_count_at_that_state_only(tmp_path: Path) -> None:
    conn = _corpus(tmp_path / "c.sqlite", random.Random(9), rows=300)
    postings = Postings(FTS_TOKENIZER, _memory_db)
    words = ["running", "pelican", "common", "absent", "café"]
    assert postings.count(conn, "pelican") is None  # nothing counted at this state yet
    postings.top(conn, words, 6)
    for word in words:
        (fts5,) = conn.execute(
            "select count(*) from chunks_fts where chunks_fts match ?", (f'"{word}"',)
        ).fetchone()
        assert postings.count(conn, word) == fts5, word
    assert postings.count(conn, "16.4") is None  # two tokens: a phrase FTS5 counts
    conn.execute("insert into chunks_fts(rowid, body) values (10000000, 'pelican')")
    assert postings.count(conn, "pelican") is None  # another state
