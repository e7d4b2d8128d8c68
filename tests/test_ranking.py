"""Pure ranking rules: fusion, decay, path matches, MMR, minScore, snippets (no SQLite)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from memoryd.core import text as text_mod
from memoryd.core.layout import note_date
from memoryd.core.ranking import (
    Candidate,
    RankParams,
    _matched_terms,
    age_in_days,
    auto_text_weight,
    continue_snippet,
    decay_multiplier,
    exact_token_share,
    extend_chunk,
    path_match_level,
    rank,
    select_snippet,
    uncovered_window,
    with_score,
)
from memoryd.core.text import matched_terms, may_match, query_terms, text_terms, word_set

SCORES_ONLY = RankParams(
    vector_weight=1, text_weight=0, fusion="weighted", min_score=0, max_results=3
)


def cand(i: int, path: str, text: str, score: float, **kw: object) -> Candidate:
    return Candidate(i, path, "memory", 1, 1, text, vector_score=score, vector_rank=i, **kw)  # type: ignore[arg-type]


def test_mmr_drops_the_near_duplicate_home_network_note() -> None:
    """The seed's worked example: λ=0.7 keeps 02-10, network.md and the AdGuard note."""
    cands = [
        cand(
            0, "memory/2026-02-10.md", "Configured Omada router, set VLAN 10 for IoT devices", 0.92
        ),
        cand(1, "memory/2026-02-08.md", "Configured Omada router, moved IoT to VLAN 10", 0.89),
        cand(
            2, "memory/network.md", "Router: Omada ER605, AdGuard: 192.168.10.2, VLAN 10: IoT", 0.85
        ),
        cand(3, "memory/2026-02-05.md", "Set up AdGuard DNS on 192.168.10.2", 0.78),
    ]
    without = rank(cands, "home network setup", SCORES_ONLY)
    assert [c.path for c in without] == [
        "memory/2026-02-10.md",
        "memory/2026-02-08.md",
        "memory/network.md",
    ]
    params = RankParams(
        vector_weight=1,
        text_weight=0,
        fusion="weighted",
        min_score=0,
        max_results=3,
        mmr_enabled=True,
        mmr_lambda=0.7,
    )
    with_mmr = [c.path for c in rank(cands, "home network setup", params)]
    # the seed's point: the 02-08 near-duplicate gives way to the two diverse notes
    assert with_mmr[0] == "memory/2026-02-10.md"
    assert set(with_mmr[1:]) == {"memory/network.md", "memory/2026-02-05.md"}
    assert "memory/2026-02-08.md" not in with_mmr


def test_temporal_decay_rod_example() -> None:
    now = datetime(2026, 2, 10, 12, tzinfo=UTC)
    cands = [
        cand(0, "memory/2025-09-15.md", "Rod works Mon-Fri, standup at 10am, pairing at 2pm", 0.91),
        cand(1, "memory/2026-02-10.md", "Rod has standup at 14:15, 1:1 with Zeb at 14:45", 0.82),
        cand(2, "memory/2026-02-03.md", "Rod started new team, standup moved to 14:15", 0.80),
    ]
    plain = rank(cands, "what's Rod's work schedule?", SCORES_ONLY, now=now)
    assert plain[0].path == "memory/2025-09-15.md"
    decayed_params = RankParams(
        vector_weight=1,
        text_weight=0,
        fusion="weighted",
        min_score=0,
        max_results=3,
        decay_enabled=True,
    )
    decayed = rank(cands, "what's Rod's work schedule?", decayed_params, now=now)
    assert [c.path for c in decayed] == [
        "memory/2026-02-10.md",
        "memory/2026-02-03.md",
        "memory/2025-09-15.md",
    ]
    assert decayed[0].score == pytest.approx(0.82)
    assert decayed[1].score == pytest.approx(0.80 * 0.85, abs=0.01)
    assert decayed[2].score == pytest.approx(0.03, abs=0.005)


@pytest.mark.parametrize(
    ("days", "expected"), [(0, 1.0), (7, 0.85), (30, 0.5), (90, 0.125), (180, 0.0156)]
)
def test_decay_curve(days: int, expected: float) -> None:
    assert decay_multiplier(days, 30) == pytest.approx(expected, abs=0.006)


@pytest.mark.parametrize(
    ("path", "source", "evergreen"),
    [
        ("MEMORY.md", "memory", True),
        ("memory.md", "memory", True),
        ("memory/network.md", "memory", True),
        ("memory/projects/alpha.md", "memory", True),
        ("memory/2026-01-15.md", "memory", False),
        ("memory/2026-11-29-reset.md", "memory", False),
        ("sessions/abc.jsonl", "sessions", False),
    ],
)
def test_evergreen_files(path: str, source: str, evergreen: bool) -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    assert (age_in_days(path, source, 0.0, now) is None) is evergreen


def test_ages_come_from_file_names_and_mtime_for_sessions() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    assert age_in_days("memory/2026-11-23-standup.md", "memory", None, now) == 7
    assert age_in_days("MEMORY.md", "memory", 0.0, now) is None
    assert age_in_days("s.jsonl", "sessions", now.timestamp() - 2 * 86400, now) == pytest.approx(2)
    assert note_date("memory/2026-02-30.md") is None  # not a real date: evergreen


def test_evergreen_files_are_untouched_by_decay() -> None:
    now = datetime(2026, 11, 30, tzinfo=UTC)
    params = RankParams(
        vector_weight=1, text_weight=0, fusion="weighted", min_score=0, decay_enabled=True
    )
    out = rank(
        [cand(0, "MEMORY.md", "x", 0.5), cand(1, "memory/notes.md", "y", 0.4)], "q", params, now=now
    )
    assert [c.score for c in out] == [0.5, 0.4]


@pytest.mark.parametrize(
    ("query", "path", "level"),
    [
        ("memory/network.md", "memory/network.md", 3),
        ("show me memory/network.md please", "memory/network.md", 3),
        ("what is in network.md", "memory/network.md", 2),
        ("network", "memory/network.md", 1),
        ("2026-02-10", "memory/2026-02-10.md", 1),
        ("home network setup", "memory/network.md", 0),
        ("networking", "memory/network.md", 0),
        ("MEMORY.md", "MEMORY.md", 3),
    ],
)
def test_path_match_levels(query: str, path: str, level: int) -> None:
    assert path_match_level(query, path) == level


def test_path_match_ranks_above_partial_text_matches() -> None:
    cands = [
        cand(0, "memory/2026-01-01.md", "notes about the network and the router", 0.9),
        cand(1, "memory/network.md", "VLAN plan", 0.2),
    ]
    out = rank(cands, "network.md", SCORES_ONLY)
    assert out[0].path == "memory/network.md"


def test_keyword_hits_survive_when_everything_is_under_min_score() -> None:
    """The seed's rule, kept by the per-query fusions (the calibrated default abstains instead)."""
    params = RankParams(min_score=0.9, max_results=3, fusion="relative")
    cands = [
        Candidate(
            0,
            "a.md",
            "memory",
            1,
            1,
            "alpha beta",
            vector_score=0.2,
            vector_rank=0,
            text_rank=0,
            text_score=3.0,
        ),
        Candidate(1, "b.md", "memory", 1, 1, "gamma", vector_score=0.3, vector_rank=1),
    ]
    out = rank(cands, "alpha", params)
    assert [c.path for c in out] == ["a.md"]  # the vector-only weak hit is dropped


def test_keyword_only_hits_fill_empty_slots() -> None:
    params = RankParams(min_score=0.5, max_results=3, fusion="relative")
    cands = [
        Candidate(
            0,
            "a.md",
            "memory",
            1,
            1,
            "alpha",
            vector_score=0.95,
            vector_rank=0,
            text_rank=0,
            text_score=2.0,
        ),
        Candidate(1, "b.md", "memory", 1, 1, "alpha again", text_rank=1, text_score=0.4),
        Candidate(2, "c.md", "memory", 1, 1, "nothing", vector_score=0.1, vector_rank=1),
    ]
    out = rank(cands, "alpha", params)
    assert [c.path for c in out] == ["a.md", "b.md"]


def test_both_terms_outrank_one_term_in_default_fusion() -> None:
    params = RankParams(min_score=0, max_results=3)
    cands = [
        Candidate(0, "one.md", "memory", 1, 1, "hello there friend", text_rank=0, text_score=2.0),
        Candidate(1, "both.md", "memory", 1, 1, "hello world", text_rank=1, text_score=1.9),
    ]
    assert rank(cands, "hello world", params)[0].path == "both.md"


@pytest.mark.parametrize("fusion", ["weighted", "rrf", "relative", "auto"])
def test_every_fusion_scores_in_unit_range_and_prefers_agreement(fusion: str) -> None:
    params = RankParams(min_score=0, max_results=3, fusion=fusion)  # type: ignore[arg-type]
    cands = [
        Candidate(
            0,
            "both.md",
            "memory",
            1,
            1,
            "alpha",
            vector_score=0.8,
            vector_rank=0,
            text_rank=0,
            text_score=3.0,
        ),
        Candidate(1, "vec.md", "memory", 1, 1, "beta", vector_score=0.7, vector_rank=1),
        Candidate(2, "kw.md", "memory", 1, 1, "alpha", text_rank=1, text_score=1.0),
    ]
    out = rank(cands, "alpha", params)
    assert out[0].path == "both.md"
    assert all(0 <= c.score <= 1 for c in out)


def test_snippet_window_holds_the_matching_lines() -> None:
    lines = [
        f"filler line number {i} with padding text to make it long enough" for i in range(1, 40)
    ]
    lines[29] = "The secret launch code is PINEAPPLE-42"
    text = "\n".join(lines)
    snippet, first, last = select_snippet(text, 101, 139, "launch code", 700)
    assert "PINEAPPLE-42" in snippet
    assert len(snippet) <= 700
    assert first <= 130 <= last
    assert snippet.splitlines()[0] == lines[first - 101]


def test_snippet_window_keeps_more_of_the_lines_after_the_match() -> None:
    # in a conversation the reply follows the line that names the topic: of the lines the
    # window has room for around a lone match, more come after it than before
    lines = [
        f"Speaker {i % 2}: turn number {i} of a long chat, filler words to pad it"
        for i in range(40)
    ]
    lines[20] = "Melanie: did you go to the pottery class in the end?"
    text = "\n".join(lines)
    snippet, first, last = select_snippet(text, 1, 40, "pottery class", 700)
    assert first <= 21 <= last and len(snippet) <= 700
    assert last - 21 > 21 - first


def test_short_chunks_are_returned_whole() -> None:
    assert select_snippet("a\nb", 5, 6, "a") == ("a\nb", 5, 6)


def test_one_long_line_is_cut_around_the_match() -> None:
    text = "x " * 1000 + "needle " + "y " * 1000
    snippet, first, last = select_snippet(text, 3, 3, "needle", 700)
    assert "needle" in snippet and len(snippet) <= 700 and (first, last) == (3, 3)


@pytest.mark.parametrize("fusion", ["minmax", "zscore"])
def test_normalized_fusions_score_in_unit_range_and_prefer_agreement(fusion: str) -> None:
    params = RankParams(min_score=0, max_results=3, fusion=fusion)  # type: ignore[arg-type]
    cands = [
        Candidate(
            0,
            "both.md",
            "memory",
            1,
            1,
            "alpha",
            vector_score=0.86,
            vector_rank=0,
            text_rank=0,
            text_score=3.0,
        ),
        Candidate(1, "vec.md", "memory", 1, 1, "beta", vector_score=0.84, vector_rank=1),
        Candidate(2, "kw.md", "memory", 1, 1, "alpha", text_rank=1, text_score=1.0),
    ]
    out = rank(cands, "alpha", params)
    assert out[0].path == "both.md"
    assert all(0 <= c.score <= 1 for c in out)


def test_auto_keyword_match_beats_a_crowded_cosine_band() -> None:
    """e5-style cosines sit in a narrow band; an exact keyword hit must not drown in it."""
    params = RankParams(min_score=0, max_results=3)
    cands = [
        Candidate(
            0,
            "chat.md",
            "memory",
            1,
            1,
            "we talked about many things",
            vector_score=0.84,
            vector_rank=0,
        ),
        Candidate(
            1,
            "ids.md",
            "memory",
            1,
            1,
            "ticket INC-4471 was closed",
            vector_score=0.81,
            vector_rank=2,
            text_rank=0,
            text_score=4.0,
        ),
        Candidate(
            2, "misc.md", "memory", 1, 1, "weather was fine", vector_score=0.83, vector_rank=1
        ),
    ]
    assert rank(cands, "what happened to INC-4471", params)[0].path == "ids.md"


def test_auto_leans_semantic_for_prose_when_keywords_are_weak() -> None:
    params = RankParams(min_score=0, max_results=3)
    cands = [
        Candidate(
            0,
            "close.md",
            "memory",
            1,
            1,
            "she adopted a puppy last spring",
            vector_score=0.92,
            vector_rank=0,
            text_rank=1,
            text_score=0.5,
        ),
        Candidate(
            1,
            "far.md",
            "memory",
            1,
            1,
            "the dog show was loud",
            vector_score=0.78,
            vector_rank=1,
            text_rank=0,
            text_score=0.6,
        ),
    ]
    assert rank(cands, "when did she get her new dog pet", params)[0].path == "close.md"


@pytest.mark.parametrize(
    ("query", "exact"),
    [
        ("what similarity laws must be obeyed", False),
        ("error E1234 in deploy.yaml", True),
        ("ECONNREFUSED on port 8080", True),
        ("what is in network.md", True),
        ("how does parseConfig handle defaults", True),
    ],
)
def test_exact_tokens_are_recognised(query: str, exact: bool) -> None:
    assert (exact_token_share(query) > 0) is exact
    assert (auto_text_weight(query) > auto_text_weight("plain prose words")) is exact


def test_vector_only_scores_let_min_score_drop_the_tail() -> None:
    params = RankParams(min_score=0.35, max_results=3, fusion="relative")
    cands = [cand(i, f"{i}.md", "x", s) for i, s in enumerate([0.86, 0.85, 0.80, 0.79])]
    out = rank(cands, "anything", params)
    assert [c.path for c in out] == ["0.md", "1.md"]


def test_snippet_prefers_the_rare_term_over_a_name_on_every_line() -> None:
    lines = [
        f"Caroline: small talk number {i} about nothing in particular at all, really"
        for i in range(30)
    ]
    lines[22] = "Caroline: I went to the pottery workshop with my kids"
    text = "\n".join(lines)
    snippet, first, last = select_snippet(
        text, 1, 30, "What did Caroline make at the pottery workshop?", 300
    )
    assert "pottery workshop" in snippet
    assert first <= 23 <= last
    # the match sits inside the window, not at its edge
    assert first < 23 < last


@pytest.mark.parametrize(
    ("after", "cap", "expected"),
    [
        (11, 700, ("c\nd", 12, 13)),  # the lines right after the window
        (12, 700, ("d", 13, 13)),
        (13, 700, None),  # the window reached the chunk's end
        (11, 1, ("c", 12, 12)),  # whole lines within the cap
        (9, 700, None),  # before the chunk: not a continuation
    ],
)
def test_a_continuation_is_the_whole_lines_after_the_window(
    after: int, cap: int, expected: tuple[str, int, int] | None
) -> None:
    # chunk lines 10..13: "a", "b", "c", "d"
    assert continue_snippet("a\nb\nc\nd", 10, 13, after, cap) == expected


def test_a_continuation_of_only_blank_lines_is_none() -> None:
    assert continue_snippet("a\nb\n\n", 1, 4, 2) is None


@pytest.mark.parametrize(
    ("following", "cap", "expected"),
    [
        # the next chunk overlaps lines 12-13: only its lines after 13 are added
        ([("c\nd\ne\nf", 12, 15)], 700, ("a\nb\nc\nd\ne\nf", 15)),
        # two next chunks, in order, each adding what comes after the lines so far
        ([("d\ne", 13, 14), ("e\nf\ng", 14, 16)], 700, ("a\nb\nc\nd\ne\nf\ng", 16)),
        # whole lines within the cap ("e\n" and "f\n" are 2 characters each)
        ([("d\ne\nf\ng", 13, 16)], 4, ("a\nb\nc\nd\ne\nf", 15)),
        ([("d\ne", 13, 14)], 1, ("a\nb\nc\nd", 13)),
        # a gap in line numbers, or a chunk inside these lines, is not a continuation
        ([("x\ny", 15, 16)], 700, ("a\nb\nc\nd", 13)),
        ([("c\nd", 12, 13)], 700, ("a\nb\nc\nd", 13)),
        ([], 700, ("a\nb\nc\nd", 13)),
    ],
)
def test_a_chunk_extends_into_the_lines_its_next_chunks_add(
    following: list[tuple[str, int, int]], cap: int, expected: tuple[str, int]
) -> None:
    # chunk lines 10..13: "a", "b", "c", "d"
    assert extend_chunk("a\nb\nc\nd", 10, 13, following, cap) == expected


def test_a_continuation_goes_on_into_the_next_chunk_when_the_window_was_the_whole_chunk() -> None:
    text, last = extend_chunk("a\nb", 1, 2, [("b\nc\nd", 2, 4)])
    assert continue_snippet("a\nb", 1, 2, 2) is None
    assert continue_snippet(text, 1, last, 2) == ("c\nd", 3, 4)


@pytest.mark.parametrize(
    ("shown", "expected"),
    [
        ([], ("a\nb\nc\nd", 10, 13)),
        ([(1, 5)], ("a\nb\nc\nd", 10, 13)),  # other lines of the file
        ([(8, 11)], ("c\nd", 12, 13)),  # an earlier chunk's overlap: the head goes
        ([(12, 20)], ("a\nb", 10, 11)),  # the continuation already showed the tail
        ([(8, 10), (13, 13)], ("b\nc", 11, 12)),
        ([(11, 12)], ("a\nb\nc\nd", 10, 13)),  # shown lines inside: kept, one run of lines
        ([(9, 14)], None),  # everything already shown
        ([(10, 11), (12, 13)], None),
    ],
)
def test_a_window_drops_the_edge_lines_earlier_results_show(
    shown: list[tuple[int, int]], expected: tuple[str, int, int] | None
) -> None:
    assert uncovered_window("a\nb\nc\nd", 10, 13, shown) == expected


def test_a_cut_long_line_is_kept_whole_or_dropped() -> None:
    cut = "x" * 700  # one line of a longer paragraph: the snippet does not map to lines 1:1
    assert uncovered_window(cut + "\n" + cut, 5, 5, []) == (cut + "\n" + cut, 5, 5)
    assert uncovered_window(cut, 5, 5, [(5, 5)]) is None


# Words that share stems, plurals, snake_case parts, possessives, CJK runs and mixed scripts:
# the shapes `matched_terms` treats differently.
_VOCAB = [
    "deploy",
    "deploying",
    "deploys",
    "note",
    "notes",
    "idle",
    "server_idle_timeout",
    "q4",
    "Caroline's",
    "caroline",
    "api",
    "APIs",
    "budget",
    "北京",
    "会议",
    "预算",
    "北京开会",
    "İstanbul",
    "straße",
    "the",
    "and",
    "run",
    "runs",
    "ab",
    "x",
]


@given(
    st.lists(st.sampled_from(_VOCAB), max_size=12),
    st.lists(st.sampled_from(_VOCAB), min_size=1, max_size=4),
    st.sampled_from([" ", "\n", ", ", "-", "_", "："]),
)
@example(["deploying"], ["deploys"], " ")  # by its stem only
@example(["server_idle_timeout"], ["idle"], " ")  # a snake_case part
@example(["北京开会"], ["北京"], " ")  # a CJK substring
@example(["Caroline's", "notes"], ["caroline"], "\n")  # a possessive word, by its owner
def test_may_match_never_skips_a_text_that_holds_a_term(
    words: list[str], query_words: list[str], sep: str
) -> None:
    """Ranking and snippets skip a text's word set when `may_match` says no term can match:
    that must only ever happen when `matched_terms` finds nothing."""
    text = sep.join(words)
    terms = query_terms(" ".join(query_words))
    found = matched_terms(terms, text, word_set(text))
    if found:
        assert may_match(terms, text.lower())


def _regex_word_set(text: str) -> frozenset[str]:
    """`word_set` as the regex defines it, for every text (the fast path is for ASCII)."""
    lowered = text_mod.segment_for_fts(text.lower())
    words = set(text_mod._SPLIT_WORD.findall(lowered)) - text_mod.STOPWORDS
    for w in [w for w in words if "_" in w]:
        words.update(p for p in w.split("_") if p and p not in text_mod.STOPWORDS)
    return frozenset(words)


@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
@example("Deploy_Server's IDLE-timeout: 30s; it's 'quoted' (v2.1) [x] {y} @z #1 ~a `b` \\c")
@example("_ _a a_ __init__ DON'T 0x1F\t\n\r\x00\x7f")
def test_ascii_word_sets_are_the_regexs_words(text: str) -> None:
    """The byte-translation path gives exactly the words `_SPLIT_WORD` finds."""
    assert word_set(text) == _regex_word_set(text)


_TEXT_VOCAB = [
    *_VOCAB,
    "there",  # a stopword that `ther…` stems would prefix
    "these",
    "other",
    "deploy_the_runs",  # snake_case with a stopword part
    "__init__",
    "_",
    "x_",
    "notes'",
    "ab'c",
    "DEPLOYING",
    "naïve",
]


@given(
    st.lists(st.sampled_from(_TEXT_VOCAB), max_size=14),
    st.lists(st.sampled_from([*_TEXT_VOCAB, "ther", "deplo", "thes"]), min_size=1, max_size=4),
    st.sampled_from([" ", "\n", ", ", "-", "_", "'", ".", "："]),
)
@example(["there"], ["ther"], " ")  # a stem only a stopword starts
@example(["there", "thermal"], ["ther"], " ")
@example(["deploy_the_runs"], ["the"], " ")  # a stopword part
@example(["server_idle_timeout"], ["idle"], " ")  # a snake_case part
@example(["server_idle_timeout"], ["server_idle_timeout"], " ")  # the whole identifier
@example(["Caroline's", "notes"], ["caroline"], "\n")
@example(["notes'"], ["notes"], " ")
def test_text_terms_are_what_the_word_set_matches(
    words: list[str], query_words: list[str], sep: str
) -> None:
    """Ranking and snippets match terms without building word sets: the same terms."""
    text = sep.join(words)
    terms = query_terms(" ".join(query_words))
    assert text_terms(terms, text) == matched_terms(terms, text, word_set(text))


def test_terms_noted_ahead_serve_their_query_only() -> None:
    """A search notes its keyword hits' terms while the query embeds; ranking uses the note
    for that query's terms, and works them out afresh for any other."""
    c = Candidate(1, "memory/a.md", "memory", 1, 1, "Deploying to fly.io on Friday")
    assert _matched_terms(c, query_terms("deploy friday")) == {"deploy", "friday"}
    c.matched = (("deploy", "friday"), frozenset({"friday"}))  # believed, not recomputed
    assert _matched_terms(c, ["deploy", "friday"]) == {"friday"}
    assert _matched_terms(c, ["fly"]) == {"fly"}


def test_with_score_copies_every_field_but_the_score() -> None:
    import dataclasses

    values: dict[str, object] = {}
    for i, f in enumerate(dataclasses.fields(Candidate)):  # a distinct value in every field
        values[f.name] = {
            "words": frozenset({"w"}),
            "matched": (("t",), frozenset({"t"})),
            "path": "memory/x.md",
            "source": "memory",
            "text": "some text",
        }.get(f.name, float(i) if f.name in ("mtime", "vector_score", "text_score") else i)
    c = Candidate(**values)  # type: ignore[arg-type]
    copy = with_score(c, 0.25)
    assert copy == dataclasses.replace(c, score=0.25) and copy is not c and c.score != 0.25
