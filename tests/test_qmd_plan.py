"""Query planning for qmd: an agent's question as a structured `qmd query` document (pure)."""

from __future__ import annotations

import pytest

from memoryd.qmd_adapter._plan import (
    MAX_PLAN_WORDS,
    content_words,
    is_qmd_syntax,
    is_query_document,
    plan_query,
)


@pytest.mark.parametrize(
    ("question", "words"),
    [
        # stopwords and question words go; a possessive names its owner
        (
            "What did Andrew and his girlfriend do on the weekend?",
            ["andrew", "girlfriend", "weekend"],
        ),
        (
            "When did Caroline's LGBTQ support group meet?",
            ["caroline", "lgbtq", "support", "group", "meet"],
        ),
        ("Whose idea might the zeppelin have been?", ["idea", "zeppelin"]),
        # identifiers stay whole (qmd reads them as phrases, dotted parts ANDed)
        ("why does ERR_CART_TTL_EXPIRED fire?", ["err_cart_ttl_expired", "fire"]),
        ("what changed in v1.2.3 of gpt-4?", ["changed", "v1.2.3", "gpt-4"]),
        # CJK runs become character pairs, each a phrase for qmd
        ("北京会议", ["北京", "京会", "会议"]),
        ("q4会议 budget", ["q4", "会议", "budget"]),
        # a question of only stopwords still searches for its words
        ("what is it?", ["what", "is", "it"]),
        ("", []),
        ("?!", []),
    ],
)
def test_content_words_keep_what_the_notes_can_hold(question: str, words: list[str]) -> None:
    assert content_words(question) == words


def test_content_words_are_capped() -> None:
    many = " ".join(f"word{i}" for i in range(40))
    assert content_words(many) == [f"word{i}" for i in range(MAX_PLAN_WORDS)]


def test_a_natural_question_becomes_all_words_then_pairs_then_each_word() -> None:
    plan = plan_query(
        "What did Andrew and his girlfriend do on the weekend?", mode="search", vectors=False
    )
    assert plan is not None and not plan.verbatim and not plan.vector
    assert plan.document.split("\n") == [
        "lex: andrew girlfriend weekend",
        "lex: andrew girlfriend",
        "lex: andrew weekend",
        "lex: girlfriend weekend",
        "lex: andrew",
        "lex: girlfriend",
        "lex: weekend",
    ]
    assert plan.snippet_query == "What did Andrew and his girlfriend do on the weekend?"


@pytest.mark.parametrize(
    ("question", "lines"),
    [
        ("zeppelin", ["lex: zeppelin"]),
        ("zeppelin budget", ["lex: zeppelin budget", "lex: zeppelin", "lex: budget"]),
    ],
)
def test_short_questions_need_no_pairs(question: str, lines: list[str]) -> None:
    plan = plan_query(question, mode="search", vectors=False)
    assert plan is not None and plan.document.split("\n") == lines


@pytest.mark.parametrize(
    ("mode", "vectors", "first", "lex"),
    [
        ("search", True, None, True),  # keyword-only: never a vec line, no model needed
        ("query", False, None, True),  # no embeddings yet: keywords only
        ("query", True, "vec: when is the zeppelin launch", True),
        ("vsearch", True, "vec: when is the zeppelin launch", False),
        ("vsearch", False, None, True),
    ],
)
def test_a_vec_line_only_when_the_mode_wants_it_and_qmd_has_embeddings(
    mode: str, vectors: bool, first: str | None, lex: bool
) -> None:
    plan = plan_query("when is the zeppelin launch", mode=mode, vectors=vectors)  # type: ignore[arg-type]
    assert plan is not None
    lines = plan.document.split("\n")
    assert plan.vector == (first is not None)
    if first is not None:
        assert lines[0] == first
    assert any(line.startswith("lex:") for line in lines) == lex


@pytest.mark.parametrize(
    ("query", "document", "snippet_query"),
    [
        ('"green tea" -coffee', 'lex: "green tea" -coffee', "green tea"),
        ("budget -zeppelin", "lex: budget -zeppelin", "budget"),
        (
            "lex: zeppelin\nvec: when will the airship launch",
            "lex: zeppelin\nvec: when will the airship launch",
            None,
        ),
        ("  LEX: kerosene", "LEX: kerosene", "kerosene"),
    ],
)
def test_a_query_in_qmd_syntax_is_kept_as_written(
    query: str, document: str, snippet_query: str | None
) -> None:
    assert is_qmd_syntax(query)
    plan = plan_query(query, mode="search", vectors=False)
    assert plan is not None and plan.verbatim and plan.document == document
    if snippet_query is not None:
        assert plan.snippet_query.split() == snippet_query.split()
    assert plan.vector == ("vec:" in query)


@pytest.mark.parametrize(
    "question",
    [
        "what's the e-mail of Bob?",  # a hyphen inside a word is no negation
        "it was -5 degrees",  # nor a minus sign
        'He said "hi',  # an unmatched quote is text (qmd would refuse it as lex syntax)
        "Dr. Smith's notes: lexicon",
    ],
)
def test_natural_text_is_not_mistaken_for_qmd_syntax(question: str) -> None:
    assert not is_qmd_syntax(question)
    plan = plan_query(question, mode="query", vectors=True)
    assert plan is not None and not plan.verbatim
    assert is_query_document(plan.document)
    for line in plan.document.split("\n"):
        kind, _, text = line.partition(": ")
        assert kind in ("lex", "vec") and text.strip()
        assert '"' not in text  # no quote can unbalance a line
        assert not any(tok.startswith("-") for tok in text.split())  # no accidental negation


def test_nothing_to_search_plans_nothing() -> None:
    assert plan_query("   ", mode="search", vectors=False) is None
    assert plan_query("?!", mode="search", vectors=False) is None


@pytest.mark.parametrize(
    "document",
    [
        "lex: support\nplain words",  # a line without a type
        'lex: "support group',  # an unmatched quote
        "lex: x\nvec: support -group",  # negation on a vector line
        "expand: a\nlex: b",  # expand must be alone
        "intent: only an intent",
        "lex:   ",
    ],
)
def test_a_query_document_qmd_would_refuse_is_read_as_a_question(document: str) -> None:
    # an agent's typo must not make qmd fail (and the agent fail over)
    assert not is_query_document(document)
    plan = plan_query(document, mode="search", vectors=False)
    assert plan is None or is_query_document(plan.document)
    if plan is not None:
        assert all(line.startswith("lex: ") for line in plan.document.split("\n"))


@pytest.mark.parametrize(
    "document",
    ["lex: a\nvec: b", "intent: cars\nlex: engine", "expand: faster cars", "hyde: a note about x"],
)
def test_a_query_document_qmd_accepts_is_kept(document: str) -> None:
    assert is_query_document(document)
    plan = plan_query(document, mode="search", vectors=False)
    assert plan is not None and plan.verbatim and plan.document == document
