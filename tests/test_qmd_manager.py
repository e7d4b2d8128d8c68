"""QmdManager against the real qmd (BM25 search mode, no models needed).

One seeded, indexed agent home is shared per module; tests that change collections or files get
their own home.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import filelock
import pytest

from helpers import background, concurrently, within
from memoryd.config import ResolvedAgent
from memoryd.errors import PathNotAllowed, QmdBadOutput, QmdExitError, QmdTimeout, QmdUnavailable
from memoryd.paths import agent_state
from memoryd.qmd_adapter import QmdManager
from qmd_support import (
    MISSING_MODEL,
    collections_of,
    fault_wrapper,
    make_agent,
    make_manager,
    memory_get,
    require_qmd,
    seed_workspace,
    write,
)

pytestmark = [pytest.mark.qmd]


@pytest.fixture(scope="module")
def qmd_bin() -> str:
    return require_qmd()


class Shared:
    def __init__(self, root: Path, qmd: str) -> None:
        self.qmd = qmd
        self.ws = seed_workspace(root / "ws")
        self.notes = write(
            root / "notes" / "ideas" / "rocket.md", "# Rocket\n\nThe rocket uses kerosene fuel.\n"
        ).parents[1]
        self.home = root / "home"
        self.settings: dict[str, Any] = {"paths": [{"path": str(self.notes), "name": "notes"}]}

    def agent(self) -> ResolvedAgent:
        return make_agent(self.ws, "main", **self.settings)

    def manager(self, **kw: Any) -> QmdManager:
        mgr = make_manager(self.agent(), self.qmd, self.home, **kw)
        mgr.start()
        return mgr


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, qmd_bin: str) -> Iterator[Shared]:
    s = Shared(tmp_path_factory.mktemp("qmd-shared"), qmd_bin)
    s.manager()
    yield s


def started(agent: ResolvedAgent, qmd: str, home: Path, **kw: Any) -> QmdManager:
    mgr = make_manager(agent, qmd, home, **kw)
    mgr.start()
    return mgr


# ---------------------------------------------------------------- home and collections


def test_start_creates_scoped_collections_in_the_agent_home(
    shared: Shared, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NODE_COMPILE_CACHE")  # the suite shares one; a user's default is checked
    mgr = shared.manager()
    assert sorted(collections_of(mgr)) == [
        "memory-alt-main",
        "memory-dir-main",
        "memory-root-main",
        "memory-user-main",
        "notes-main",
    ]
    existing = mgr.list_collections()
    assert existing["memory-dir-main"].path == str(shared.ws / "memory")
    assert existing["memory-dir-main"].pattern == "**/*.md"
    assert existing["memory-root-main"].pattern == "MEMORY.md"
    assert existing["notes-main"].path == str(shared.notes)
    assert (shared.home / "xdg-config" / "qmd" / "index.yml").is_file()
    assert (shared.home / "xdg-cache" / "qmd" / "index.sqlite").is_file()
    assert (shared.home / "sessions").is_dir()
    env = mgr.env()
    assert env["XDG_CONFIG_HOME"] == str(shared.home / "xdg-config")
    assert env["QMD_CONFIG_DIR"] == str(shared.home / "xdg-config" / "qmd")
    assert env["XDG_CACHE_HOME"] == str(shared.home / "xdg-cache")
    assert env["NO_COLOR"] == "1"
    assert "CI" not in env
    mgr.probe()
    assert (mgr.status().version or "").startswith("qmd 2.")
    # Node's compiled copy of qmd lives in the agent's own cache, private like the rest
    cache = shared.home / "xdg-cache" / "node-compile-cache"
    assert env["NODE_COMPILE_CACHE"] == str(cache)
    assert [p for p in cache.rglob("*") if p.is_file()], "node wrote no compile cache"
    assert all(stat.S_IMODE(p.stat().st_mode) & 0o077 == 0 for p in cache.rglob("*"))


def test_a_compile_cache_the_caller_set_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memoryd.qmd_adapter._home import QmdHome

    home = QmdHome(tmp_path / "qmd")
    monkeypatch.setenv("NODE_COMPILE_CACHE", "/opt/cc")
    assert home.env()["NODE_COMPILE_CACHE"] == "/opt/cc"
    assert "NODE_COMPILE_CACHE" not in home.env(overrides={"NODE_COMPILE_CACHE": None})


def test_default_home_is_under_the_agent_state_dir(
    qmd_bin: str, tmp_path: Path, isolated_env: Path
) -> None:
    ws = seed_workspace(tmp_path / "ws")
    mgr = QmdManager(
        make_agent(ws, "ops_bot").qmd_settings(), command=qmd_bin, env_overrides={"CI": None}
    )
    mgr.start()
    root = (
        isolated_env / "agents" / "ops_bot" / "workspaces" / agent_state("ops_bot", ws).key / "qmd"
    )
    assert mgr.home.root == root
    for sub in ("xdg-config", "xdg-cache", "sessions"):
        assert (root / sub).is_dir()
    # The shared models folder is linked into the agent's cache so models download once.
    link = root / "xdg-cache" / "qmd" / "models"
    assert link.is_symlink()
    assert link.resolve() == (tmp_path / "_xdg_cache" / "qmd" / "models").resolve()
    assert "memory-root-ops-bot" in collections_of(mgr)


def test_pinned_models_are_written_before_the_first_run(qmd_bin: str, tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    models = {"embed": "/models/e.gguf", "generate": MISSING_MODEL, "rerank": MISSING_MODEL}
    mgr = started(make_agent(ws, models=models), qmd_bin, tmp_path / "home")
    text = (tmp_path / "home" / "xdg-config" / "qmd" / "index.yml").read_text()
    assert "/models/e.gguf" in text
    assert "memory-root-main" in text  # qmd kept our models block and added its collections
    # A changed pin is written over what qmd resolved.
    models["embed"] = "/models/other.gguf"
    started(make_agent(ws, models=models), qmd_bin, tmp_path / "home")
    text = (tmp_path / "home" / "xdg-config" / "qmd" / "index.yml").read_text()
    assert "/models/other.gguf" in text and "/models/e.gguf" not in text
    assert collections_of(mgr)


def test_changed_path_or_pattern_rebinds_the_collection(qmd_bin: str, tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    other = write(tmp_path / "other" / "x.md", "# X\n\nquokka sighting\n").parent
    home = tmp_path / "home"
    first = started(
        make_agent(ws, paths=[{"path": str(ws / "memory"), "name": "extra", "pattern": "*.md"}]),
        qmd_bin,
        home,
    )
    assert (first.list_collections())["extra-main"].pattern == "*.md"
    second = started(make_agent(ws, paths=[{"path": str(other), "name": "extra"}]), qmd_bin, home)
    info = (second.list_collections())["extra-main"]
    assert (info.path, info.pattern) == (str(other), "**/*.md")
    hits = second.search("quokka").results
    assert [h.path for h in hits] == ["qmd/extra-main/x.md"]


def test_include_default_memory_false_drops_the_default_collections(
    qmd_bin: str, tmp_path: Path
) -> None:
    ws = seed_workspace(tmp_path / "ws")
    mgr = started(
        make_agent(ws, includeDefaultMemory=False, paths=[{"path": "memory", "name": "m"}]),
        qmd_bin,
        tmp_path / "h",
    )
    assert list(collections_of(mgr)) == ["m-main"]
    assert [r.path for r in mgr.search("zeppelin").results] == ["memory/2026-01-03.md"]


def test_legacy_unscoped_collections_are_removed_only_when_they_match(
    qmd_bin: str, tmp_path: Path
) -> None:
    ws = seed_workspace(tmp_path / "ws")
    elsewhere = write(tmp_path / "elsewhere" / "a.md", "# a\n").parent
    home = tmp_path / "home"
    bare = make_manager(make_agent(ws, includeDefaultMemory=False), qmd_bin, home)
    bare.start()
    bare._run(
        ["collection", "add", str(ws), "--name", "memory-root", "--mask", "MEMORY.md"], 30_000
    )
    bare._run(
        ["collection", "add", str(elsewhere), "--name", "memory-dir", "--mask", "**/*.md"], 30_000
    )
    mgr = started(make_agent(ws), qmd_bin, home)
    names = set(mgr.list_collections())
    assert "memory-root" not in names  # same path and pattern: replaced by memory-root-main
    assert "memory-dir" in names  # different path: not ours to remove
    assert {"memory-root-main", "memory-alt-main", "memory-dir-main"} <= names


def test_a_leftover_on_the_same_path_and_mask_is_recovered_from(
    qmd_bin: str, tmp_path: Path
) -> None:
    ws = seed_workspace(tmp_path / "ws")
    home = tmp_path / "home"
    bare = make_manager(make_agent(ws, includeDefaultMemory=False), qmd_bin, home)
    bare.start()
    bare._run(
        ["collection", "add", str(ws / "memory"), "--name", "stray", "--mask", "**/*.md"], 30_000
    )
    mgr = started(make_agent(ws), qmd_bin, home)
    names = set(mgr.list_collections())
    assert "memory-dir-main" in names and "stray" not in names


def test_a_missing_memory_folder_is_picked_up_on_a_later_sync(qmd_bin: str, tmp_path: Path) -> None:
    ws = write(tmp_path / "ws" / "MEMORY.md", "# M\n\nwombat\n").parent
    mgr = started(make_agent(ws), qmd_bin, tmp_path / "home")
    assert "memory-dir-main" not in collections_of(mgr)
    write(ws / "memory" / "n.md", "# n\n\nplatypus notes\n")
    mgr.update()
    assert "memory-dir-main" in collections_of(mgr)
    assert [r.path for r in mgr.search("platypus").results] == ["memory/n.md"]


# ---------------------------------------------------------------- search


def test_search_maps_qmd_json_to_results(shared: Shared) -> None:
    mgr = shared.manager()
    (hit,) = mgr.search("zeppelin budget").results
    assert hit.path == "memory/2026-01-03.md"
    assert hit.source == "memory"
    lines = (shared.ws / hit.path).read_text().splitlines()
    # The snippet is exactly the file's lines start..end.
    assert hit.snippet.split("\n") == lines[hit.start_line - 1 : hit.end_line]
    assert "Carol owns the zeppelin budget." in hit.snippet
    assert hit.start_line <= 4 <= hit.end_line
    assert not hit.snippet.startswith("@@")
    assert 0 <= hit.score <= 1


def test_search_covers_every_collection_and_maps_outside_paths(shared: Shared) -> None:
    mgr = shared.manager()
    assert [r.path for r in mgr.search("Alice").results] == [
        "MEMORY.md",
        "memory/2026-01-02.md",
    ] or sorted(r.path for r in mgr.search("Alice").results) == [
        "MEMORY.md",
        "memory/2026-01-02.md",
    ]
    assert [r.path for r in mgr.search("kerosene").results] == ["qmd/notes-main/ideas/rocket.md"]
    assert [r.path for r in mgr.search("tomatoes").results] == ["memory/projects/garden.md"]
    assert mgr.search("xylophone").results == []


def test_search_limits_apply(shared: Shared) -> None:
    mgr = shared.manager()
    assert len(mgr.search("the", max_results=1).results) == 1
    assert mgr.search("zeppelin", min_score=1.01).results == []
    short = make_manager(
        make_agent(
            shared.ws,
            paths=shared.settings["paths"],
            limits={"maxSnippetChars": 12, "maxInjectedChars": 20},
        ),
        shared.qmd,
        shared.home,
    )
    short.start()
    hits = short.search("Alice").results
    assert [len(h.snippet) for h in hits] == [12, 12]  # snippets capped here …
    answer = short.search("Alice")
    assert answer.max_injected_chars == 20  # … the budget is applied once, by the orchestrator


def test_garbage_stdout_raises_bad_output(shared: Shared, tmp_path: Path) -> None:
    wrapper = fault_wrapper(
        tmp_path / "qmd",
        shared.qmd,
        'if [ "$1" = query ]; then "$REAL" "$@" > /dev/null; echo "Segmentation fault (core dumped)"; exit 0; fi\nexec "$REAL" "$@"',
    )
    mgr = make_manager(shared.agent(), wrapper, shared.home)
    mgr.start()
    with pytest.raises(QmdBadOutput):
        mgr.search("zeppelin")


def test_missing_binary_raises_unavailable(shared: Shared, tmp_path: Path) -> None:
    mgr = make_manager(shared.agent(), str(tmp_path / "nope" / "qmd"), shared.home)
    with pytest.raises(QmdUnavailable):
        mgr.start()
    with pytest.raises(QmdUnavailable):
        mgr.probe()
    assert "not found" in (mgr.last_error or "")


def test_search_timeout_kills_and_raises(shared: Shared, tmp_path: Path) -> None:
    wrapper = fault_wrapper(
        tmp_path / "qmd", shared.qmd, 'if [ "$1" = query ]; then sleep 30; fi\nexec "$REAL" "$@"'
    )
    mgr = make_manager(shared.agent(), wrapper, shared.home)
    mgr.start()
    with within(10), pytest.raises(QmdTimeout):
        mgr.search("zeppelin", timeout_ms=800)


def test_one_planned_query_call_searches_every_collection_without_models(
    shared: Shared, tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    wrapper = fault_wrapper(
        tmp_path / "qmd",
        shared.qmd,
        f'for a in "$@"; do printf "%s\\0" "$a" >> "{calls}"; done; printf "\\001" >> "{calls}"\n'
        'exec "$REAL" "$@"',
    )
    mgr = make_manager(shared.agent(), wrapper, shared.home, env={"CI": "true"})
    mgr.start()
    calls.write_text("")
    # CI makes qmd refuse every model call: a keyword search must need none
    hits = mgr.search("Who owns the zeppelin budget?").results
    assert [h.path for h in hits] == ["memory/2026-01-03.md"]
    (argv,) = [call.split("\0")[:-1] for call in calls.read_text().split("\x01")[:-1]]
    assert argv[0] == "query" and "--no-rerank" in argv and "--json" in argv
    assert argv[1].split("\n")[0] == "lex: owns zeppelin budget"
    named = [argv[i + 1] for i, a in enumerate(argv) if a == "-c"]
    assert sorted(named) == sorted(collections_of(mgr))


def test_a_collection_lost_behind_our_back_is_recreated_once(qmd_bin: str, tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    mgr = started(make_agent(ws), qmd_bin, tmp_path / "home")
    mgr._run(["collection", "remove", "memory-dir-main"], 30_000)
    hits = mgr.search("zeppelin").results
    assert [h.path for h in hits] == ["memory/2026-01-03.md"]
    assert "memory-dir-main" in mgr.list_collections()


def test_a_restart_trusts_an_unchanged_registry_and_rechecks_a_changed_one(
    qmd_bin: str, tmp_path: Path
) -> None:
    # A one-off CLI call starts a manager each time: `collection list` + a `show` per
    # collection is four node processes that find nothing to do when index.yml is unchanged.
    ws = seed_workspace(tmp_path / "ws")
    calls = tmp_path / "calls"
    wrapper = fault_wrapper(
        tmp_path / "qmd", qmd_bin, f'echo "$1 $2" >> "{calls}"\nexec "$REAL" "$@"'
    )
    home = tmp_path / "home"
    started(make_agent(ws), wrapper, home)
    assert "collection list" in calls.read_text()
    calls.write_text("")
    again = started(make_agent(ws), wrapper, home)
    assert calls.read_text() == ""  # nothing asked of qmd
    assert sorted(collections_of(again)) == [
        "memory-alt-main",
        "memory-dir-main",
        "memory-root-main",
        "memory-user-main",
    ]
    # someone removes a collection behind memoryd's back: the registry changed, so the next
    # start asks qmd and re-creates it
    again._run(["collection", "remove", "memory-dir-main"], 30_000)
    calls.write_text("")
    third = started(make_agent(ws), wrapper, home)
    assert "collection list" in calls.read_text()
    assert "collection add" in calls.read_text()
    assert "memory-dir-main" in third.list_collections()
    # and a different wish (another extra path) is checked too
    calls.write_text("")
    extra = write(tmp_path / "extra" / "e.md", "# E\n").parent
    started(make_agent(ws, paths=[{"path": str(extra), "name": "x"}]), wrapper, home)
    assert "collection add" in calls.read_text()


def test_other_qmd_failures_surface_as_exit_errors(shared: Shared, tmp_path: Path) -> None:
    wrapper = fault_wrapper(
        tmp_path / "qmd",
        shared.qmd,
        'if [ "$1" = query ]; then echo "boom: disk on fire" >&2; exit 3; fi\nexec "$REAL" "$@"',
    )
    mgr = make_manager(shared.agent(), wrapper, shared.home)
    mgr.start()
    with pytest.raises(QmdExitError) as info:
        mgr.search("zeppelin")
    assert info.value.returncode == 3 and "disk on fire" in info.value.stderr


def test_busy_database_is_retried(shared: Shared, tmp_path: Path) -> None:
    marker = tmp_path / "failed-once"
    wrapper = fault_wrapper(
        tmp_path / "qmd",
        shared.qmd,
        f'if [ "$1" = query ] && [ ! -e "{marker}" ]; then touch "{marker}"; echo "SqliteError: database is locked" >&2; exit 1; fi\nexec "$REAL" "$@"',
    )
    mgr = make_manager(shared.agent(), wrapper, shared.home)
    mgr.start()
    assert [h.path for h in mgr.search("zeppelin").results] == ["memory/2026-01-03.md"]
    assert marker.exists()


# ---------------------------------------------------------------- update and maintenance


def test_update_after_an_edit_shows_the_new_text(qmd_bin: str, tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    mgr = started(make_agent(ws), qmd_bin, tmp_path / "home")
    assert mgr.search("narwhal").results == []
    write(ws / "memory" / "2026-01-03.md", "# 2026-01-03\n\nA narwhal visited the office.\n")
    mgr.update()
    (hit,) = mgr.search("narwhal").results
    assert hit.path == "memory/2026-01-03.md" and "narwhal visited" in hit.snippet
    assert mgr.search("zeppelin budget").results == []
    assert mgr.status().to_dict()["lastUpdateAt"] is not None


def test_concurrent_updates_queue_and_both_run(qmd_bin: str, tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    mgr = started(make_agent(ws), qmd_bin, tmp_path / "home")
    ran: list[float | None] = []

    def update() -> None:
        mgr.update()
        ran.append(mgr.status().last_update_at)

    with concurrently() as tg:
        tg.start_soon(update)
        tg.start_soon(update)
    assert len(ran) == 2 and None not in ran


def test_maintenance_waits_for_the_lock_held_by_another_process(
    qmd_bin: str, tmp_path: Path
) -> None:
    ws = seed_workspace(tmp_path / "ws")
    home = tmp_path / "home"
    mgr = started(make_agent(ws), qmd_bin, home)
    other = filelock.FileLock(str(mgr.home.lock_path), thread_local=False)
    other.acquire()
    done = threading.Event()

    def update() -> None:
        mgr.update()
        done.set()

    with concurrently() as tg:
        tg.start_soon(update)
        time.sleep(1.0)
        assert not done.is_set()
        other.release()
        with within(30):
            done.wait()


def test_sync_never_embeds_in_search_mode(shared: Shared, tmp_path: Path) -> None:
    mgr = started(shared.agent(), shared.qmd, tmp_path / "home")  # no embed yet: one is due
    assert mgr.search_mode == "search"
    mgr.sync()
    status = mgr.status()
    assert status.last_update_at is not None and status.last_embed_at is None


def test_update_while_searching_raises_nothing(shared: Shared) -> None:
    mgr = shared.manager()
    other = shared.manager()
    errors: list[BaseException] = []

    def searches() -> None:
        for _ in range(8):
            try:
                assert [h.path for h in mgr.search("zeppelin").results] == ["memory/2026-01-03.md"]
            except BaseException as err:  # collect, so every failure is reported
                errors.append(err)

    def updates() -> None:
        for _ in range(4):
            other.update()

    with concurrently() as tg:
        tg.start_soon(searches)
        tg.start_soon(searches)
        tg.start_soon(updates)
    assert errors == []


def test_timers_run_boot_refresh_periodic_update_and_requests(qmd_bin: str, tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    agent = make_agent(ws, update={"interval": "1s", "debounceMs": 200, "onBoot": True})
    mgr = make_manager(agent, qmd_bin, tmp_path / "home")
    with background() as tg:
        mgr.start(tg)
        with within(20):
            while mgr.status().last_update_at is None:  # boot refresh ran in the background
                time.sleep(0.05)
            first = mgr.status().last_update_at
            while mgr.status().last_update_at == first:  # then the 1 s timer
                time.sleep(0.05)
            write(ws / "memory" / "new.md", "# new\n\nokapi\n")
            mgr.notify_changed()
            while not mgr.search("okapi").results:
                time.sleep(0.1)
        mgr.close()


def test_wait_for_boot_sync_updates_before_start_returns(qmd_bin: str, tmp_path: Path) -> None:
    ws = seed_workspace(tmp_path / "ws")
    mgr = started(make_agent(ws, update={"waitForBootSync": True}), qmd_bin, tmp_path / "home")
    assert mgr.status().last_update_at is not None


# ---------------------------------------------------------------- memory_get


def test_read_file_serves_qmd_and_workspace_paths(shared: Shared) -> None:
    mgr = shared.manager()
    rocket = memory_get(mgr, "qmd/notes-main/ideas/rocket.md")
    assert "kerosene" in rocket.text
    sliced = memory_get(mgr, "memory/2026-01-03.md", from_line=3, lines=1)
    assert sliced.text == "The zeppelin launch slipped to April.\n"
    assert (memory_get(mgr, "MEMORY.md")).text.startswith("# Memory")
    assert (memory_get(mgr, "qmd/notes-main/ideas/missing.md")).to_dict() == {
        "path": "qmd/notes-main/ideas/missing.md",
        "text": "",
        "missing": True,
    }


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("qmd/nope-main/a.md", "unknown qmd collection"),
        ("qmd/notes-main/../../ws/MEMORY.md", "'..'"),
        ("qmd/notes-main/ideas/rocket.txt", "Markdown"),
        ("qmd/notes-main", "not a Markdown"),
        ("../outside.md", "'..'"),
        ("/etc/passwd", "not a Markdown"),
        ("/etc/passwd.md", "not a memory file"),
        ("README.md", "not a memory file"),
        ("memory/escape.md", "symlink"),
    ],
)
def test_read_file_refuses_unsafe_paths(
    shared: Shared, tmp_path: Path, path: str, message: str
) -> None:
    secret = write(tmp_path / "secret.md", "top secret\n")
    link = shared.ws / "memory" / "escape.md"
    if not link.is_symlink():
        os.symlink(secret, link)
    mgr = shared.manager()
    with pytest.raises(PathNotAllowed, match=message):
        memory_get(mgr, path)


# ---------------------------------------------------------------- isolation and sessions


def test_two_agents_never_see_each_others_documents(
    qmd_bin: str, tmp_path: Path, isolated_env: Path
) -> None:
    ws_a = write(tmp_path / "a" / "MEMORY.md", "# A\n\nThe aardvark password is apricot.\n").parent
    ws_b = write(tmp_path / "b" / "MEMORY.md", "# B\n\nThe badger password is blueberry.\n").parent
    a = QmdManager(
        make_agent(ws_a, "alpha").qmd_settings(),
        command=qmd_bin,
        env_overrides={"CI": None},
        shared_models_dir=None,
    )
    b = QmdManager(
        make_agent(ws_b, "beta").qmd_settings(),
        command=qmd_bin,
        env_overrides={"CI": None},
        shared_models_dir=None,
    )
    a.start()
    b.start()
    assert a.home.root != b.home.root
    assert [r.path for r in a.search("aardvark").results] == ["MEMORY.md"]
    assert a.search("badger").results == []
    assert b.search("aardvark").results == []
    assert b.search("password").results != [] and all(
        "badger" in r.snippet for r in b.search("password").results
    )
    with pytest.raises(PathNotAllowed):
        memory_get(a, "qmd/memory-root-beta/MEMORY.md")


def test_memory_and_session_hits_are_interleaved(qmd_bin: str, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    for i in range(4):
        write(ws / "memory" / f"m{i}.md", f"# m{i}\n\nllama llama notes {i}\n")
    export = tmp_path / "sessions"
    for i in range(4):
        write(export / f"s{i}.md", f"# session {i}\n\nuser: llama llama llama llama llama {i}\n")
    mgr = started(
        make_agent(ws, sessions={"enabled": True, "exportDir": str(export)}),
        qmd_bin,
        tmp_path / "h",
    )
    assert collections_of(mgr)["sessions-main"].source == "sessions"
    hits = mgr.search("llama", max_results=4).results
    assert sorted(h.source for h in hits) == ["memory", "memory", "sessions", "sessions"]
    assert hits[0].source != hits[1].source
    assert all(h.path.startswith("qmd/sessions-main/") for h in hits if h.source == "sessions")


@pytest.mark.parametrize(("setting", "stage"), [(None, None), (False, None), (True, "qmd")])
def test_the_search_skips_qmds_reranker_and_qmd_rerank_turns_on_the_stage(
    tmp_path: Path, setting: bool | None, stage: str | None
) -> None:
    # `memory.qmd.rerank` is read as `memorySearch.query.rerank.provider = "qmd"`: the search
    # that chooses (and scores) the hits stays `--no-rerank`, the stage's own call reranks
    extra = {} if setting is None else {"rerank": setting}
    mgr = make_manager(make_agent(tmp_path, **extra), "qmd", tmp_path / "home")
    argv = mgr.search_argv("lex: zeppelin", ["memory-root-main"], 8)
    assert argv[:2] == ["query", "lex: zeppelin"]
    assert "--no-rerank" in argv
    assert "--no-rerank" not in mgr.search_argv("lex: zeppelin", ["m"], 8, rerank=True)
    assert (mgr.rerank_stage.cfg.provider if mgr.rerank_stage else None) == stage
    # asked for more than qmd fuses by default, it is told to keep that many candidates
    assert "-C" not in argv
    assert mgr.search_argv("lex: zeppelin", ["memory-root-main"], 60)[5:7] == ["-C", "60"]
