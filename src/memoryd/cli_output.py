"""What the `memoryd` command prints for people (without `--json`): searches and status."""

from __future__ import annotations

import sys
import time
from typing import Any

from .core.text import visible_controls


def print_search(out: dict[str, Any]) -> None:
    """A `memory_search` answer: notes on stderr, a header line, then each hit and its snippet."""
    if out.get("scopeDenied"):
        print(f"Denied: {visible_controls(out['reason'])}")
        return
    fallback = out.get("fallback")
    if fallback and fallback.get("from") == "qmd":
        reason = visible_controls(str(fallback.get("reason")))
        print(f"note: answered by the built-in index: {reason}", file=sys.stderr)
    if out.get("stale"):
        print(
            f"note: the qmd index is {out.get('staleSeconds')}s behind the memory files "
            "(run `memoryd index`, or keep `memoryd serve` running)",
            file=sys.stderr,
        )
    for note in out.get("notes", []):
        print(f"note: {visible_controls(note)}", file=sys.stderr)
    n = len(out["results"])
    embedder = out.get("provider") or "no embeddings"
    if out.get("model"):
        embedder += f" ({out['model']})"
    header = [
        f"{n} result{'s' if n != 1 else ''}" if n else "no matches",
        f"{out.get('backend')} backend" + (" (qmd failed over)" if fallback else ""),
        # the built-in index's mode is a kind of search; qmd's modes are searches already
        f"{out.get('mode')} {'mode' if out.get('backend') == 'qmd' else 'search'}",
        embedder,
    ]
    if out.get("stale"):
        header.append(f"qmd {out.get('staleSeconds')}s behind")
    print(" · ".join(header))
    if not n:
        return
    print()
    for r in out["results"]:
        print(f"{r['score']:.3f} {visible_controls(r['path'])}:{r['startLine']}-{r['endLine']}")
        explain = explain_lines(r["explain"]) if r.get("explain") is not None else []
        # split on newlines only: a CR, FF or U+2028 inside a line is shown, not obeyed
        for line in [*r["snippet"].split("\n"), *explain]:
            print(f"    {visible_controls(line)}")
        print()


def explain_lines(e: dict[str, Any]) -> list[str]:
    """`--explain`'s compact block for one result (docs/retrieval-quality.md has the formula)."""
    if e.get("engine") == "qmd":
        q = e.get("qmd") or {}
        return [
            f"explain: qmd score {_f(q.get('score'))} (minScore {_f(e.get('minScore'))})"
            f" · rerank {_rerank(e.get('rerank'))}",
            "  qmd query  " + " | ".join(q.get("query") or []),
        ]
    cal, fused = e.get("calibration"), e.get("fused") or {}
    decay = e.get("decay")
    mult = decay["multiplier"] if decay else 1.0
    importance = (e.get("importance") or {}).get("multiplier")
    weight = f" × importance {_f(importance)}" if importance is not None else ""
    if cal is not None:
        capped = (
            f" (capped at evidence {_f(cal['evidence'])})" if cal.get("cappedAtEvidence") else ""
        )
        head = (
            f"explain: score {_f(e.get('score'))} = confidence {_f(cal['confidence'])}"
            f" × closeness {_f(fused.get('closeness'))}^{cal['rankShape']}{capped}"
            f" × decay {_f(mult)}{weight}"
        )
    else:
        head = f"explain: score {_f(e.get('score'))} = {fused.get('fusion')} {_f(fused.get('score'))} × decay {_f(mult)}{weight}"
    lines = [head]
    kw = e.get("keyword") or {}
    terms = ", ".join(kw.get("matchedTerms") or []) or "none"
    named = ", ".join(kw.get("fileNameTerms") or [])
    kw_line = f"  keyword   bm25 {_f(kw.get('bm25'))}{_place(kw.get('rank'))} · terms {terms}"
    if named:
        kw_line += f" · file name {named}"
    if "evidence" in kw:
        kw_line += f" · share {_f(kw.get('share'))} → evidence {_f(kw['evidence'])}"
    lines.append(kw_line)
    vec = e.get("vector")
    if vec is None:
        lines.append("  vector    not searched, or not among its candidates")
    else:
        v_line = f"  vector    cosine {_f(vec.get('cosine'))}{_place(vec.get('rank'))}"
        bg = vec.get("background")
        if vec.get("z") is not None:
            v_line += f" · z {_f(vec['z'])}"
            if bg:
                v_line += f" vs background {_f(bg['mean'])}±{_f(bg['sd'])}"
            v_line += f" (floor {_f(vec.get('floor'))}) → evidence {_f(vec.get('evidence'))}"
        lines.append(v_line)
    if cal is not None:
        lines.append(
            f"  fused     relative {_f(fused.get('relative'))} of best {_f(fused.get('best'))}"
            f" (auto) · evidence {_f(cal['evidence'])} · minScore {_f(e.get('minScore'))}"
        )
    path = (e.get("path") or {}).get("match")
    mmr = e.get("mmr")
    lines.append(
        f"  boosts    path {path or 'none'}"
        + (f" · decay age {decay['ageDays']:.0f}d" if decay else " · decay none")
        + (f" · mmr #{mmr['before']} → #{mmr['after']}" if mmr else " · mmr off")
        + f" · rerank {_rerank(e.get('rerank'))}"
    )
    if e.get("continuation"):
        lines.append("  (the lines after the best hit, from the same chunk)")
    return lines


def _f(x: Any) -> str:
    return "–" if x is None else f"{x:.3f}" if isinstance(x, float) else str(x)


def _place(rank: Any) -> str:
    return f" (#{rank + 1})" if isinstance(rank, int) else ""


def _rerank(r: dict[str, Any] | None) -> str:
    if r is None:
        return "off"
    if r.get("degraded"):
        return f"degraded ({r['degraded']})"
    return f"{r.get('provider')} {_f(r.get('score'))} (#{r.get('before')} → #{r.get('after')})"


def _when(ts: float | None) -> str:
    """`12s ago`, `in 13s`, `5 min ago`, or the date for anything further away."""
    if not ts:
        return "never"
    age = time.time() - ts
    if abs(age) < 5400:
        span = f"{abs(age):.0f}s" if abs(age) < 90 else f"{abs(age) / 60:.0f} min"
        return f"{span} ago" if age >= 0 else f"in {span}"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def print_status(st: dict[str, Any]) -> None:
    """Aligned `key  value` rows, then the issues (plain text: no table wrapped at 80 columns)."""
    backend = st["backend"]
    if st["requestedBackend"] != backend:
        backend += f" (qmd requested; failed over: {(st.get('fallback') or {}).get('reason')})"
    rows: list[tuple[str, str]] = [
        ("agent", st["agentId"]),
        ("workspace", st["workspaceDir"]),
        ("backend", backend),
        (
            "embeddings",
            f"{st.get('provider') or 'none'}" + (f" ({st['model']})" if st.get("model") else ""),
        ),
    ]
    b = st.get("builtin")
    if b:
        rows += _builtin_rows(b)
    q = st.get("qmd")
    if q:
        rows += _qmd_rows(st, q)
    check = st.get("check")
    if check is not None:
        rows.append(("index check", _check_line(check)))
    if st.get("servedBy"):
        rows.append(("answered by", st["servedBy"]))
    width = max(len(key) for key, _ in rows)
    for key, value in rows:  # values are data (paths, reasons): never terminal controls
        print(f"{key:<{width}}  {visible_controls(str(value))}")
    for issue in st.get("issues", []):
        print(f"issue: {visible_controls(issue)}")


def _builtin_rows(b: dict[str, Any]) -> list[tuple[str, str]]:
    pending = f", {b['pendingVectors']} waiting for embeddings" if b["pendingVectors"] else ""
    on_pg = b["fts"].get("engine", "fts5") == "tsvector"
    vec = b["vector"]
    vectors = (
        f"{vec['engine']}, searched with {vec['searchEngine']}"
        + (f" ({vec['dims']} dims)" if vec.get("dims") else "")
        + (f", queries embedded by {vec['queryEngine']}" if vec.get("queryEngine") else "")
        + (f" ({vec['queryEngineProblem']})" if vec.get("queryEngineProblem") else "")
        + (f" — {vec['loadError']}" if vec.get("loadError") else "")
    )
    keyword = "PostgreSQL tsvector" if on_pg else "FTS5"
    return [
        ("indexed", f"{b['files']} files, {b['chunks']} chunks{pending}"),
        ("up to date", "no (files changed since the last sync)" if b["dirty"] else "yes"),
        ("last sync", _when(b.get("lastSyncAt"))),
        *[
            ("skipped", skipped_line(f["path"], f["reason"], f["detail"]))
            for f in b.get("skippedFiles", [])
        ],
        ("index (PostgreSQL)" if on_pg else "index file", b["dbPath"]),
        ("vectors", vectors),
        (
            "keyword search",
            keyword if b["fts"]["available"] else f"unavailable: {b['fts']['error']}",
        ),
        ("embedding cache", f"{b['cache']['entries']:,} of {b['cache']['maxEntries']:,}"),
    ]


def _qmd_rows(st: dict[str, Any], q: dict[str, Any]) -> list[tuple[str, str]]:
    version = q.get("version") or (
        "not a qmd version" if q.get("versionError") else "version unknown"
    )
    rows = [
        ("qmd", f"{version} ({q['command']}), mode {q['searchMode']}"),
        ("qmd collections", ", ".join(c["name"] for c in q["collections"]) or "none yet"),
        ("qmd last update", _when(st.get("lastUpdateAt"))),
        ("qmd last embed", _when(st.get("lastEmbedAt"))),
    ]
    rec = st.get("recovery") or {}
    if st.get("fallback"):
        due = rec.get("nextProbeAt")
        late = due is not None and due <= time.time()
        rows.append(("next qmd probe", f"due ({_when(due)})" if late else _when(due)))
        if rec.get("lastProbeError"):
            rows.append(("last probe", rec["lastProbeError"]))
    if st.get("healthUpdatedAt"):
        rows.append(("health recorded", _when(st["healthUpdatedAt"])))
    return rows


def _check_line(check: dict[str, Any]) -> str:
    """`status --deep`: what the index file check found and did."""
    took = f" in {check.get('seconds', 0):.2f}s"
    if check.get("ok"):
        return "ok (integrity and counts verified" + took + ")"
    line = f"damaged: {check.get('problem')}"
    if check.get("movedTo"):
        line += f"; moved to {check['movedTo']}"
    if check.get("rebuilt"):
        line += "; rebuilt from the memory files"
    return line + took


#: What each reason a file was not indexed means, in the words status and index print.
_SKIP_REASONS = {
    "read_failed": "cannot be read",
    "binary": "not text",
    "too_large": "too large",
    "refused": "refused",
}


def skipped_line(path: str, reason: str, detail: str) -> str:
    return visible_controls(f"{path} ({_SKIP_REASONS.get(reason, reason)}: {detail})")
