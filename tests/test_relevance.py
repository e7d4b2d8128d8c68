"""Relevance: calibrated scores that abstain off-topic, CJK query terms, recall across scripts.

Pure rules run on plain candidates; the index tests run a real SQLite index over real files
with the deterministic hashing embedder; the `slow` tests run the real local model (e5-small)
on the demo workspace and on notes written in Chinese, Japanese and English.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hashing_embedder import HashingEmbedder
from helpers import CountingQueries
from memoryd.builtin_index import MemoryIndex
from memoryd.config import ResolvedAgent, resolve_agent, validate_config
from memoryd.core.ranking import (
    REFERENCE_QUERIES,
    Candidate,
    CorpusStats,
    RankParams,
    fuse,
    idf,
    lexical_evidence,
    rank,
    vector_z,
)
from memoryd.core.results import MAX_SNIPPET_CHARS
from memoryd.core.text import query_terms, script_of, split_scripts
from memoryd.embeddings.base import EmbeddingProvider, ProviderSelection
from memoryd.embeddings.selection import select_provider

DEMO = Path(__file__).resolve().parents[1] / "demo" / "workspace"
DEFAULT = RankParams()  # the shipped defaults: fusion auto, minScore 0.35, top 6


def auto(candidates: list[Candidate], query: str, stats: CorpusStats | None) -> list[Candidate]:
    """The default fusion's calibrated scores."""
    return fuse(candidates, query, DEFAULT, stats)


def chunk(i: int, text: str, *, cos: float | None = None, bm25: float | None = None) -> Candidate:
    return Candidate(
        i,
        f"memory/{i}.md",
        "memory",
        1,
        1,
        text,
        vector_score=cos,
        vector_rank=i if cos is not None else None,
        text_rank=i if bm25 is not None else None,
        text_score=bm25,
    )


# e5-like reference background: unrelated text scores 0.76 ± 0.03 in one script, lower across
E5_LIKE = {
    ("latin", "latin"): (0.76, 0.03),
    ("latin", "zh"): (0.72, 0.025),
    ("zh", "zh"): (0.81, 0.02),
    ("zh", "latin"): (0.72, 0.02),
}


def stats(chunks: int, df: dict[str, int]) -> CorpusStats:
    return CorpusStats(chunks, df, E5_LIKE, ())


# ----------------------------------------------------------------------------- query terms


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("北京", ["北京"]),
        ("会", ["会"]),
        ("北京的会议", ["北京", "京的", "的会", "会议"]),
        ("Q4会议 北京", ["q4", "会议", "北京"]),
        ("東京の会議", ["東京", "京の", "の会", "会議"]),
        ("the PgBouncer timeout", ["pgbouncer", "timeout"]),
    ],
)
def test_cjk_runs_become_bigrams_and_latin_words_stay_whole(query: str, terms: list[str]) -> None:
    assert list(query_terms(query)) == terms


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("What is Caroline's relationship status?", ["caroline", "relationship", "status"]),
        ("Maria’s kitten", ["maria", "kitten"]),
        ("it's John's", ["john"]),
        ("don't panic", ["don't", "panic"]),
    ],
)
def test_a_possessive_searches_for_its_owner(query: str, terms: list[str]) -> None:
    assert list(query_terms(query)) == terms


def test_a_lone_cjk_character_is_its_own_bigram() -> None:
    assert split_scripts("会") == ["会"] and split_scripts("会议室") == ["会议", "议室"]


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("The deploy target is fly.io", "latin"),
        ("Привет, как дела", "latin"),  # every alphabet shares words the same way
        ("我们决定把数据中心迁移到上海", "zh"),
        ("東京の会議は来週です", "ja"),  # kanji with kana is Japanese
        ("회의는 다음 주입니다", "ko"),
        ("Q4 roadmap review with the 北京 team on Thursday", "latin"),
        ("决定把日志系统从 Elasticsearch 换成 ClickHouse", "zh"),
    ],
)
def test_script_of_names_the_writing_system_a_text_is_mostly_in(text: str, script: str) -> None:
    assert script_of(text) == script


def test_reference_queries_cover_every_script_the_ranking_tells_apart() -> None:
    assert set(REFERENCE_QUERIES) == {"latin", "zh", "ja", "ko"}
    for script, texts in REFERENCE_QUERIES.items():
        assert len(texts) >= 8 and all(script_of(t) == script for t in texts)


# ----------------------------------------------------------------------------- evidence


def test_a_term_missing_from_the_index_outweighs_the_common_words_a_chunk_shares() -> None:
    # "Melanie" is in no chunk of this memory; "paint" is in many
    weights = {"melanie": idf(80, 0), "paint": idf(80, 30)}
    assert weights["melanie"] > 3 * weights["paint"]
    assert lexical_evidence({"paint"}, weights) < 0.25
    assert lexical_evidence({"melanie", "paint"}, weights) == pytest.approx(1.0)


def test_a_cosine_counts_against_the_baseline_of_its_own_script_pair() -> None:
    st = stats(10, {})
    en = chunk(0, "The budget is managed by Wang Fang", cos=0.80)
    zh = chunk(1, "北京会议的预算由王芳负责", cos=0.80)
    z_en = vector_z(en, "latin", st)
    z_zh = vector_z(zh, "latin", st)
    assert z_en is not None and z_zh is not None
    # the same 0.80 is ordinary within English and far above what unrelated Chinese scores
    assert z_zh > 2 * z_en


# ----------------------------------------------------------------------------- scores


def test_an_off_topic_query_scores_under_min_score_everywhere() -> None:
    # cosines in the e5 band of unrelated text, and no query term in the index
    cands = [
        chunk(i, f"note {i} about deploys and routers", cos=c)
        for i, c in enumerate([0.79, 0.78, 0.77])
    ]
    out = auto(cands, "banana bread recipe", stats(40, {"banana": 0, "bread": 0, "recipe": 0}))
    assert max(c.score for c in out) < DEFAULT.min_score
    assert (
        rank(
            cands,
            "banana bread recipe",
            DEFAULT,
            stats=stats(40, {"banana": 0, "bread": 0, "recipe": 0}),
        )
        == []
    )


def test_scores_are_comparable_across_queries() -> None:
    """The same chunk scores higher for the query it answers than for one it barely touches."""
    text = "Raised PgBouncer server_idle_timeout to 3600 s after ECONNRESET errors"
    df = {"pgbouncer": 2, "idle": 2, "timeout": 3, "postgres": 0, "vacuum": 0, "settings": 5}
    st = stats(40, df)
    answered = auto([chunk(0, text, cos=0.86, bm25=6.0)], "pgbouncer idle timeout", st)
    touched = auto([chunk(0, text, cos=0.80, bm25=0.5)], "postgres vacuum settings", st)
    assert answered[0].score > DEFAULT.min_score > touched[0].score


def test_results_of_a_real_question_keep_the_relative_order_and_stay_above_min_score() -> None:
    df = {"caroline": 40, "pottery": 3, "workshop": 4}
    st = stats(40, df)
    cands = [
        chunk(0, "Caroline: I went to the pottery workshop with my kids", cos=0.86, bm25=5.0),
        chunk(1, "Caroline: the workshop was fun", cos=0.83, bm25=2.0),
        chunk(2, "Caroline: the kids loved the clay", cos=0.84),
    ]
    out = rank(cands, "What did Caroline make at the pottery workshop?", DEFAULT, stats=st)
    assert [c.chunk_id for c in out] == [0, 1, 2]
    assert all(c.score >= DEFAULT.min_score for c in out)
    assert out[0].score > out[1].score > out[2].score


def test_a_note_in_another_script_outranks_a_chunk_sharing_one_common_word() -> None:
    """Cross-lingual recall: the keyword side must not drown a strong vector hit it cannot see."""
    query = "who is in charge of the budget for the Beijing meeting"
    cands = [
        chunk(0, "Weekly meeting moved to Tuesday", cos=0.78, bm25=2.0),
        chunk(1, "北京会议的预算由王芳负责，上限是二十万元。", cos=0.83),
        chunk(2, "The router is in the attic", cos=0.75),
    ]
    df = {"charge": 0, "budget": 0, "beijing": 0, "meeting": 1}
    out = rank(cands, query, DEFAULT, stats=stats(3, df))
    assert out and out[0].chunk_id == 1


def test_without_vectors_keyword_evidence_alone_decides() -> None:
    df = {"adguard": 1, "dns": 2}
    st = CorpusStats(20, df)
    hit = chunk(0, "AdGuard Home is the DNS resolver for every VLAN", bm25=4.0)
    assert [c.chunk_id for c in rank([hit], "adguard dns", DEFAULT, stats=st)] == [0]
    off = CorpusStats(20, {"zebra": 0, "migration": 3})
    weak = chunk(0, "Database migration on Friday", bm25=1.0)
    assert rank([weak], "zebra migration", DEFAULT, stats=off) == []


@pytest.mark.parametrize("fusion", ["relative", "weighted", "rrf", "minmax", "zscore"])
def test_per_query_fusions_keep_the_seed_rule_that_keyword_hits_fill(fusion: str) -> None:
    params = RankParams(min_score=0.99, max_results=3, fusion=fusion)  # type: ignore[arg-type]
    cands = [chunk(0, "alpha beta", cos=0.2, bm25=3.0), chunk(1, "gamma", cos=0.3)]
    assert [c.chunk_id for c in rank(cands, "alpha", params)] == [0]


def test_the_calibrated_default_does_not_fill_with_weak_keyword_hits() -> None:
    st = stats(40, {"alpha": 30, "omega": 0})
    cands = [chunk(0, "alpha beta", cos=0.75, bm25=0.3)]
    assert rank(cands, "alpha omega", DEFAULT, stats=st) == []


# ----------------------------------------------------------------------------- the index


def agent(ws: Path, search: dict[str, object] | None = None) -> ResolvedAgent:
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(ws), "memorySearch": search or {}}}}
    )
    return resolve_agent(cfg)


def default_index(ws: Path) -> MemoryIndex:
    """The index an agent gets with the default config: the local multilingual model."""
    resolved = agent(ws)
    return MemoryIndex(
        resolved.index_settings(), select_provider(resolved.memory_search, resolved.models)
    )


def default_top_path(ws: Path, query: str) -> str | None:
    """The top result's path for `query` from a freshly synced default index of `ws`."""
    idx = default_index(ws)
    try:
        idx.sync()
        results = (idx.search(query)).results
    finally:
        idx.close()
    return results[0].path if results else None


def write(p: Path, text: str) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")


@pytest.fixture
def notes(workspace: Path) -> Path:
    write(workspace / "MEMORY.md", "# Memory\nProduction deploys go to fly.io, region ams.\n")
    write(
        workspace / "memory" / "2026-11-28.md",
        "# 2026-11-28\nRaised PgBouncer server_idle_timeout to 3600 s after ECONNRESET errors.\n",
    )
    write(workspace / "memory" / "pets.md", "# Pets\nAlice adopted a grey cat named Miso.\n")
    write(workspace / "memory" / "trip.md", "# 出張\n我们决定把数据中心迁移到上海。\n")
    return workspace


def index(ws: Path, provider: EmbeddingProvider | None) -> MemoryIndex:
    return MemoryIndex(
        agent(ws).index_settings(), ProviderSelection("test", provider, "test provider")
    )


@pytest.mark.parametrize("provider", [HashingEmbedder(), None], ids=["hybrid", "keyword-only"])
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("xyzzy", None),
        ("banana bread recipe", None),
        ("quantum chromodynamics lecture notes", None),
        ("PgBouncer idle timeout", "memory/2026-11-28.md"),
        ("Miso the cat", "memory/pets.md"),
        ("数据中心", "memory/trip.md"),
        # half of the query is only in a file name: the file is named after what it holds
        ("pets adoption", "memory/pets.md"),
        ("zebras adoption", None),
    ],
)
def test_off_topic_queries_return_nothing_and_on_topic_ones_the_note(
    notes: Path, provider: EmbeddingProvider | None, query: str, expected: str | None
) -> None:
    idx = index(notes, provider)
    idx.sync()
    results = (idx.search(query)).results
    if expected is None:
        assert results == []
    else:
        assert results and results[0].path == expected
        assert results[0].score >= DEFAULT.min_score


def test_reference_queries_are_embedded_once_and_kept_in_the_index_file(notes: Path) -> None:
    first = CountingQueries()
    idx = index(notes, first)
    idx.sync()
    idx.search("PgBouncer idle timeout")
    idx.search("Miso the cat")
    references = sum(len(t) for t in REFERENCE_QUERIES.values())
    assert len(first.texts) == references + 2
    idx.close()
    # a later process (a one-shot CLI search) reads them from the embedding cache
    second = CountingQueries()
    again = index(notes, second)
    again.search("PgBouncer idle timeout")
    assert second.texts == ["PgBouncer idle timeout"]
    again.close()


def test_the_corpus_statistics_follow_writes(notes: Path) -> None:
    idx = index(notes, HashingEmbedder())
    idx.sync()
    assert (idx.search("walrus colony")).results == []
    write(notes / "memory" / "walrus.md", "The walrus colony count was 412 this spring.\n")
    idx.sync()
    out = (idx.search("walrus colony")).results
    assert out and out[0].path == "memory/walrus.md"


# ----------------------------------------------------------------------------- the real model


@pytest.fixture
def demo(tmp_path: Path) -> Path:
    ws = tmp_path / "demo"
    shutil.copytree(DEMO, ws)
    return ws


@pytest.mark.slow
@pytest.mark.parametrize(
    "query", ["xyzzy", "banana bread recipe", "quantum chromodynamics lecture notes"]
)
def test_the_demo_workspace_abstains_on_unrelated_queries(demo: Path, query: str) -> None:
    idx = default_index(demo)
    idx.sync()
    out = idx.search(query)
    assert out.mode == "hybrid" and out.results == []
    idx.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("what did we change on PgBouncer?", "memory/2026-11-28.md"),
        ("where does production deploy to?", "MEMORY.md"),
        ("which DNS resolver do the VLANs use?", "memory/network.md"),
    ],
)
def test_the_demo_workspace_answers_real_questions(demo: Path, query: str, expected: str) -> None:
    assert default_top_path(demo, query) == expected


def drop_vectors(idx: MemoryIndex, keep: set[str]) -> None:
    """The index as a fresh workspace has it while its first chunks embed: only the chunks of
    the files in `keep` have a vector (the others wait)."""
    store = idx.store
    with store.transaction(doing="drop vectors"):
        conn = store._w  # the writer: what a sync's vector phase writes, undone
        drop = [
            (cid,) for cid, path in conn.execute("select id, path from chunks") if path not in keep
        ]
        conn.executemany("delete from chunk_vectors where chunk_id = ?", drop)
        conn.executemany("update chunks set has_vector = 0 where id = ?", drop)


@pytest.mark.slow
def test_while_vectors_are_partial_a_vector_only_hit_scores_by_its_own_evidence(
    demo: Path,
) -> None:
    # the first search on a fresh demo workspace: its first two files embedded, the webhook
    # note not yet; the embedded Japanese note was the best "vector hit" of the few there are
    idx = default_index(demo)
    idx.sync()
    drop_vectors(idx, {"MEMORY.md", "memory/2026-11-20-tokyo.md"})
    out = idx.search("when does the old webhook secret stop working?")
    idx.close()
    paths = [r.path for r in out.results]
    assert out.mode == "hybrid" and paths[0] == "memory/2026-11-29.md", paths
    assert "memory/2026-11-20-tokyo.md" not in paths
    assert any("3 of 5 chunks still waiting for embeddings" in n for n in out.notes)


def test_partial_vectors_cap_only_the_hits_the_vector_side_alone_found() -> None:
    stats = CorpusStats(
        chunks=50, term_chunks={"webhook": 2, "secret": 3, "rotated": 4}, reference=E5_LIKE
    )
    keyword_hit = chunk(0, "Rotated the webhook secret today.", bm25=8.0)  # not embedded yet
    both = chunk(1, "The webhook secret lives in the vault.", cos=0.80, bm25=5.0)
    vector_only = chunk(2, "Lunch with Rod about the roadmap.", cos=0.83)  # best cosine there is
    query = "webhook secret rotated"
    full = {c.chunk_id: c.score for c in auto([keyword_hit, both, vector_only], query, stats)}
    ranked = rank(
        [keyword_hit, both, vector_only],
        query,
        RankParams(min_score=0.0),
        stats=stats,
        partial_vectors=True,
    )
    partial = {c.chunk_id: c.score for c in ranked}
    assert partial[0] == pytest.approx(full[0]) and partial[1] == pytest.approx(full[1])
    # its evidence: a cosine 2.3 deviations above unrelated text, barely past the floor
    assert partial[2] < 0.35 < full[2]
    assert [c.chunk_id for c in ranked][:2] == [0, 1]


@pytest.fixture
def languages(workspace: Path) -> Path:
    write(
        workspace / "memory" / "2026-03-02.md",
        "# 2026-03-02\n- 北京会议的预算由王芳负责，上限是二十万元。\n- 李明负责联系同声传译。\n",
    )
    write(
        workspace / "memory" / "2026-04-10.md",
        "# 2026-04-10\n- 本番データベースのバックアップは毎晩三時に取得し、三十日間保存する。\n",
    )
    write(
        workspace / "memory" / "2026-05-26.md",
        "# 2026-05-26\n- Flight to Singapore leaves Thursday at 23:40 from terminal 2.\n",
    )
    # English notes that share a word with the questions but answer none of them
    write(
        workspace / "memory" / "2026-01-08.md", "# 2026-01-08\n- Weekly meeting moved to Tuesday.\n"
    )
    write(
        workspace / "memory" / "2026-01-13.md",
        "# 2026-01-13\n- Bought new backup drives for the NAS.\n",
    )
    return workspace


@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("who is in charge of the budget for the Beijing meeting", "memory/2026-03-02.md"),
        ("how long are database backups kept?", "memory/2026-04-10.md"),
        ("去新加坡的航班几点起飞？", "memory/2026-05-26.md"),
    ],
)
def test_a_paraphrase_in_another_language_reaches_the_note(
    languages: Path, query: str, expected: str
) -> None:
    assert default_top_path(languages, query) == expected


def test_the_best_hit_also_brings_the_lines_after_its_window_as_the_next_result(
    workspace: Path,
) -> None:
    # A conversation: the turn that names the topic, then the reply a few turns later — past
    # the 700 characters of the best hit's window, inside the same chunk. The lines after the
    # window come back as a result of their own (each snippet still within the cap).
    turns = ["# 7:30 pm on 8 May, 2023"]
    turns.append("Caroline: I went to the LGBTQ support group yesterday, it was so powerful.")
    for i in range(12):
        turns.append(
            f"Melanie: That sounds like a lot to take in; tell me more about part {i}, "
            "and how the evening went."
        )
    turns.append("Caroline: The transgender stories inspired me to pursue counseling as a career.")
    write(workspace / "memory" / "2023-05-08.md", "\n".join(turns) + "\n")
    write(workspace / "memory" / "2023-05-09.md", "# 9 May\nMelanie: I painted a lake sunrise.\n")
    # one chunk longer than a snippet (daily notes are chunked smaller by default)
    keyword_only = agent(
        workspace, {"provider": "none", "chunking": {"tokens": 400, "overlap": 80}}
    )
    idx = MemoryIndex(
        keyword_only.index_settings(),
        select_provider(keyword_only.memory_search, keyword_only.models),
    )
    idx.sync()
    results = (idx.search("what did Caroline think of the LGBTQ support group")).results
    assert len(results) >= 2
    best, after = results[0], results[1]
    assert (best.path, after.path) == ("memory/2023-05-08.md", "memory/2023-05-08.md")
    assert after.start_line == best.end_line + 1 and after.score == best.score
    assert "counseling" in after.snippet and "counseling" not in best.snippet
    assert all(len(r.snippet) <= MAX_SNIPPET_CHARS for r in results)
    # a caller asking for one result gets one
    assert len((idx.search("LGBTQ support group", max_results=1)).results) == 1
    idx.close()


def conversation(topic_turn: str, filler: int, reply_turn: str) -> str:
    turns = ["# 7:30 pm on 8 May, 2023", topic_turn]
    turns += [
        f"Melanie: Tell me more about part {i} of the evening, it sounds big."
        for i in range(filler)
    ]
    turns.append(reply_turn)
    return "\n".join(turns) + "\n"


def test_the_continuation_goes_on_into_the_next_chunk_when_chunks_are_short(
    workspace: Path,
) -> None:
    # 48-token chunks are shorter than a snippet: the best window is its whole chunk, and the
    # reply a few turns later sits in the next chunk of the same file
    write(
        workspace / "memory" / "2023-05-08.md",
        conversation(
            "Caroline: I went to the LGBTQ support group yesterday, it was so powerful.",
            2,
            "Caroline: The transgender stories inspired me to pursue counseling as a career.",
        ),
    )
    short = agent(workspace, {"provider": "none", "chunking": {"tokens": 48, "overlap": 8}})
    idx = MemoryIndex(short.index_settings(), select_provider(short.memory_search, short.models))
    idx.sync()
    results = (idx.search("what did Caroline think of the LGBTQ support group")).results
    idx.close()
    best, after = results[0], results[1]
    assert "LGBTQ" in best.snippet and "counseling" not in best.snippet
    assert after.path == best.path and after.start_line == best.end_line + 1
    assert "counseling" in after.snippet
    assert all(len(r.snippet) <= MAX_SNIPPET_CHARS for r in results)


def test_no_line_of_a_file_comes_back_twice(workspace: Path) -> None:
    # overlapping chunks that all match: each line reaches the agent once, under one result
    write(
        workspace / "memory" / "garden.md",
        "\n".join(f"Line {i}: the tomato garden needs water on day {i}." for i in range(40)) + "\n",
    )
    overlapping = agent(workspace, {"provider": "none", "chunking": {"tokens": 64, "overlap": 32}})
    idx = MemoryIndex(
        overlapping.index_settings(), select_provider(overlapping.memory_search, overlapping.models)
    )
    idx.sync()
    results = (idx.search("tomato garden water", max_results=8)).results
    idx.close()
    assert len(results) >= 4
    lines = [n for r in results for n in range(r.start_line, r.end_line + 1)]
    assert len(lines) == len(set(lines))
    for r in results:  # a result's snippet is its line range, nothing cut out of the middle
        assert r.snippet.count("\n") == r.end_line - r.start_line


@pytest.mark.parametrize(
    ("text", "cos", "vouched"),
    [
        (
            "the team offsite happens in spring",
            0.76 + 1.8 * 0.03,
            False,
        ),  # same script: 1.8 sd < 2.0
        ("团队的活动在春天举行", 0.72 + 1.8 * 0.025, True),  # another script: 1.8 sd > 1.5
    ],
)
def test_the_same_script_vector_floor_leaves_other_scripts_to_their_own(
    monkeypatch: pytest.MonkeyPatch, text: str, cos: float, vouched: bool
) -> None:
    import memoryd.core.ranking as ranking

    monkeypatch.setattr(ranking, "VEC_FLOOR_SAME_SCRIPT", 2.0)
    [scored] = auto([chunk(0, text, cos=cos)], "quarterly planning", stats(100, {}))
    assert (scored.score > 0) is vouched


@pytest.mark.parametrize("growth", [0.5, 0.68, 0.8])
def test_the_same_script_floor_of_short_chunks_grows_with_the_chunks_an_index_holds(
    monkeypatch: pytest.MonkeyPatch, growth: float
) -> None:
    import memoryd.core.ranking as ranking

    monkeypatch.setattr(ranking, "VEC_FLOOR_GROWTH", growth)
    short, long = ranking.SHORT_CHUNK_TOKENS, ranking.LONG_CHUNK_TOKENS
    sizes = [1, 10, 100, 1_000, 10_000, 100_000]
    grown = [ranking.vector_floor(True, n, short) for n in sizes]
    assert grown == sorted(grown) and grown[-1] > grown[0]
    assert min(grown) == ranking.VEC_FLOOR_SAME_SCRIPT  # a small memory keeps the fixed floor
    # a long chunk keeps the fixed floor in any index; between, the floor lies between
    assert {ranking.vector_floor(True, n, long) for n in sizes} == {ranking.VEC_FLOOR_SAME_SCRIPT}
    middle = ranking.vector_floor(True, 100_000, (short + long) // 2)
    assert ranking.VEC_FLOOR_SAME_SCRIPT < middle < grown[-1]
    # across scripts only the cosine vouches, and the cross-lingual floor stays as tuned
    assert {ranking.vector_floor(False, n, short) for n in sizes} == {ranking.VEC_FLOOR}


def test_the_same_cosine_of_a_short_chunk_is_evidence_in_a_small_memory_only() -> None:
    cos = 0.76 + 2.2 * 0.03  # 2.2 deviations above unrelated Latin text
    text = "we planned the quarter"  # a short chunk
    small, large = (
        auto([chunk(0, text, cos=cos)], "quarter plan", stats(n, {}))[0] for n in (20, 50_000)
    )
    assert small.score > large.score


def test_without_growth_the_same_script_floor_is_fixed(monkeypatch: pytest.MonkeyPatch) -> None:
    import memoryd.core.ranking as ranking

    monkeypatch.setattr(ranking, "VEC_FLOOR_GROWTH", 0.0)
    assert {
        ranking.vector_floor(True, n, t) for n in (0, 2, 100, 10**6) for t in (10, 160, 400)
    } == {ranking.VEC_FLOOR_SAME_SCRIPT}
