"""The layer picture of docs/architecture.md, enforced: which part of memoryd may import which.

Parsed from the source (no import side effects): every `import`/`from … import` of a memoryd module
is checked against `ALLOWED`, and no module may import another package's private (`_x`) module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "memoryd"

#: unit → the units it may import (besides itself). Units are the top-level modules/packages.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "background": set(),
    "core": {"errors", "background"},
    "paths": {"errors"},
    "fsio": {"core", "errors", "paths"},
    "config_validation": {"errors"},
    "config": {"core", "errors", "paths", "config_validation"},
    "config_files": {"errors", "paths", "fsio", "config", "config_validation"},
    "memfiles": {"core", "errors", "fsio"},
    "embeddings": {"core", "errors", "config"},
    "rerank": {"core", "errors", "config", "fsio", "embeddings"},
    "scope_rules": {"core", "errors", "config", "config_validation"},
    "builtin_index": {
        "core",
        "errors",
        "config",
        "fsio",
        "memfiles",
        "embeddings",
        "background",
        "rerank",
    },
    "qmd_adapter": {"core", "errors", "config", "fsio", "memfiles", "background", "rerank"},
    "lifecycle": {"core", "errors", "config", "paths", "fsio", "memfiles", "scope_rules"},
    "orchestrator": {
        "core",
        "errors",
        "config",
        "paths",
        "fsio",
        "memfiles",
        "embeddings",
        "scope_rules",
        "builtin_index",
        "qmd_adapter",
        "lifecycle",
        "background",
        "rerank",
    },
    "tools": {"core", "errors", "paths"},
    "server": {
        "core",
        "errors",
        "config",
        "paths",
        "fsio",
        "orchestrator",
        "tools",
        "background",
    },
    "mcp_server": {
        "__init__",
        "core",
        "errors",
        "paths",
        "fsio",
        "orchestrator",
        "tools",
        "background",
    },
    "cli": {
        "__init__",
        "core",
        "errors",
        "config",
        "config_files",
        "paths",
        "builtin_index",  # pg-local's throwaway PostgreSQL (builtin_index.pg_embedded)
        "server",
        "mcp_server",
        "orchestrator",
        "qmd_adapter",
        "tools",
        "progress",
        "cli_output",
    },
    "cli_output": {"core"},
    "progress": set(),
    # the public API, re-exported (loaded on first use)
    "__init__": {"errors", "config", "config_files", "core", "orchestrator"},
    "__main__": {"cli"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every memoryd import in `path`."""
    mod = _module_name(path)
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("memoryd")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("memoryd"):
                continue
            if node.module is None or target == "memoryd":
                # `from . import paths` names modules, not attributes
                out += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, target))
    return out


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _is_module(module: str) -> bool:
    rel = Path(*module.split("."))
    return (SRC / rel).with_suffix(".py").exists() or (SRC / rel / "__init__.py").exists()


SOURCES = sorted(PKG.rglob("*.py"))


def test_every_unit_has_a_rule() -> None:
    units = {_unit(_module_name(p)) for p in SOURCES}
    assert units <= set(ALLOWED), units - set(ALLOWED)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_follow_the_layers(path: Path) -> None:
    me = _unit(_module_name(path))
    bad = [
        f"line {line}: {target}"
        for line, target in _imports(path)
        if _is_module(target) and _unit(target) not in ALLOWED[me] | {me}
    ]
    assert not bad, f"{me} may import only {sorted(ALLOWED[me])}: {bad}"


def test_no_module_imports_itself_back() -> None:
    """No import circle between modules, direct or through others; imports inside functions
    count too (they are how a circle hides)."""
    graph = {
        _module_name(p): {t for _, t in _imports(p) if _is_module(t)} - {_module_name(p)}
        for p in SOURCES
    }
    circles: list[str] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append(" -> ".join([*path[path.index(module) :], module]))
        elif module not in done:
            for target in sorted(graph.get(module, ())):
                visit(target, [*path, module])
            done.add(module)

    for module in sorted(graph):
        visit(module, [])
    assert not circles, circles


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_package_imports_another_packages_private_module(path: Path) -> None:
    me = _unit(_module_name(path))
    bad = []
    for line, target in _imports(path):
        parts = target.split(".")
        private = [p for p in parts[1:] if p.startswith("_") and not p.startswith("__")]
        if private and _unit(target) != me:
            bad.append(f"line {line}: {target}")
    assert not bad, bad


def test_core_does_no_io() -> None:
    """`core` is pure: no file system, processes, sockets, SQLite or clock imports."""
    forbidden = {"os", "subprocess", "socket", "sqlite3", "sqlean", "time", "anyio", "shutil"}
    for path in sorted((PKG / "core").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # imports for type annotations only (`if TYPE_CHECKING:`) do not run
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
                node.body = []
        names = {
            a.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for a in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and not node.level
        }
        # os.path is lexical string handling; the rule is no os functions touching the system
        used = names & forbidden - {"os"}
        assert not used, f"{path.name} imports {sorted(used)}"
        if "os" in names:
            text = path.read_text(encoding="utf-8")
            calls = [
                w
                for w in ("os.open", "os.stat", "os.scandir", "os.listdir", "os.environ")
                if w in text
            ]
            assert not calls, f"{path.name} uses {calls}"


def test_wire_codes_are_error_codes() -> None:
    from memoryd import errors

    assert {errors.NotServed.code, errors.ServerBusy.code} <= set(errors.CODES)


def test_the_docs_list_every_error_code() -> None:
    from memoryd import errors

    root = Path(__file__).resolve().parents[1]
    table = (root / "docs" / "errors.md").read_text(encoding="utf-8")
    missing = [c for c in errors.CODES if f"| `{c}` |" not in table]
    assert not missing, f"docs/errors.md's table lacks {missing}"
    assert "(docs/errors.md)" in (root / "README.md").read_text(encoding="utf-8")


def test_every_file_the_suite_schedules_first_exists() -> None:
    """`conftest.LONGEST_FIRST` orders the suite's files; a renamed file would drop out silently."""
    from conftest import LONGEST_FIRST

    here = Path(__file__).parent
    assert [name for name in LONGEST_FIRST if not (here / name).is_file()] == []


#: Packages imported that the distribution does not name itself, and why that is safe.
NOT_DECLARED: dict[str, str] = {
    "pydantic_core": "pydantic's own dependency, pinned by it to the version its API matches",
}


def test_every_third_party_import_is_a_declared_dependency() -> None:
    """A fresh `pip install .` has only what pyproject.toml names (and what those need): an
    import of something the test environment happens to hold (sniffio came with anyio < 4.12
    and with the test extras, not with anyio 4.16) breaks the README's first command."""
    import importlib.metadata
    import re
    import sys
    import tomllib

    project = tomllib.loads((SRC.parent / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["postgres"]]
    declared = {
        re.split(r"[<>=!~;\[ ]", d, maxsplit=1)[0].lower().replace("_", "-") for d in wanted
    }
    providers = importlib.metadata.packages_distributions()
    missing = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top in ("memoryd", "__future__"):
                    continue
                dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
                if not dists & declared and top not in NOT_DECLARED:
                    missing.append(f"{path.relative_to(PKG)}:{node.lineno}: {top}")
    assert not missing, missing
