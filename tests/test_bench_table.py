"""`bench/readme_table.py`: the README's speed-target table, from the benchmarks' JSON."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "readme_table", ROOT / "bench" / "readme_table.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(chunks: int, hybrid: float) -> dict[str, Any]:
    engine = {
        "chunks": chunks,
        "hybrid_p50_ms": hybrid,
        "hybrid_p95_ms": round(hybrid * 1.5, 2),
        "hybrid_round10_p50_ms": 13.0,
        "hybrid_p50_over_round10": round(hybrid / 13.0, 2),
        "hybrid_round11_p50_ms": 11.0,
        "hybrid_p50_over_round11": round(hybrid / 11.0, 2),
        "keyword_p50_ms": 2.5,
        "query_embedding_p50_ms": 5.0,
    }
    return {
        "numpy": engine,
        "sqlite-vec": {**engine, "hybrid_p50_ms": hybrid + 8},
        "real_model_400tok_chunks_per_s_new": 3.4,
        "real_model_400tok_chunks_per_s_old": 1.4,
        "chunks_per_s_new_over_old": 2.43,
        "background_nice0": {
            "during_p95_ms": 45.0,
            "idle_p95_ms": 20.0,
            "searches_during": 44,
            "p95_during_over_idle": 2.25,
        },
    }


@pytest.fixture
def table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    mod = _module()
    monkeypatch.setattr(mod, "OUT", tmp_path)
    monkeypatch.setattr(mod, "README", tmp_path / "README.md")
    return mod


def test_each_target_is_judged_from_the_figures(table: Any, tmp_path: Path) -> None:
    (tmp_path / "builtin_index_10k.json").write_text(json.dumps(_run(10_031, 10.4)))
    (tmp_path / "builtin_index.json").write_text(json.dumps(_run(12_684, 9.1)))
    text = table.table()
    lines = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()}
    ten_k = lines["hybrid search p50 / p95, 10,031 chunks, in-memory KNN, query embedding included"]
    assert "10.4 / 15.6 ms" in ten_k
    assert "0.95× round 11's code (11.0 ms, same run); 0.8× round 10's code (13.0 ms" in ten_k
    assert "**not met**" in ten_k  # 10.4 ms is over 10
    # at 12.7k chunks the 10 ms target is not judged: it is set at 10k
    assert (
        "(≤ 10 ms is set at 10k"
        in lines["hybrid search p50 / p95, 12,684 chunks, in-memory KNN, query embedding included"]
    )
    assert "**met**" in lines["indexing, 400-token chunks, default model"]
    assert "**not met**" in lines["search p95 while `serve` embeds in the background"]
    assert "(not run: cold_cli.json)" in text


def test_a_run_without_round_11_is_compared_with_round_10(table: Any, tmp_path: Path) -> None:
    run = _run(10_031, 9.5)
    for engine in ("numpy", "sqlite-vec"):
        del run[engine]["hybrid_round11_p50_ms"], run[engine]["hybrid_p50_over_round11"]
    (tmp_path / "builtin_index_10k.json").write_text(json.dumps(run))
    line = next(ln for ln in table.table().splitlines() if "10,031 chunks, in-memory" in ln)
    assert "| 0.73× round 10's code (13.0 ms, same run) |" in line and "**met**" in line


def test_the_readme_block_is_written_and_checked(table: Any, tmp_path: Path) -> None:
    (tmp_path / "builtin_index.json").write_text(json.dumps(_run(10_031, 9.0)))
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\nbefore\n\n{table.START}\nold\n{table.END}\n\nafter\n")
    argv = sys.argv
    try:
        sys.argv = ["readme_table.py", "--check"]
        assert table.main() == 1
        sys.argv = ["readme_table.py", "--write"]
        assert table.main() == 0
        sys.argv = ["readme_table.py", "--check"]
        assert table.main() == 0
    finally:
        sys.argv = argv
    text = readme.read_text()
    assert text.startswith("# x\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "\nold\n" not in text and "| hybrid search p50 / p95, 10,031 chunks" in text
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- bench-table:start -->"):
        table._with_table(readme.read_text(), "x")
