"""The agent tools' input contract (OpenClaw's argument names): one pydantic model per tool,
which every surface both validates with and advertises, so the two cannot drift apart."""

from __future__ import annotations

import difflib
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema

from .core.engine import MAX_QUERY_CHARS, Corpus
from .errors import InvalidInput, MemorydError

#: Largest `maxResults`: more snippets would blow any injected-characters budget anyway.
MAX_RESULTS_LIMIT: Final = 100


def _no_bool(value: Any) -> Any:
    # pydantic's lax mode reads `true` as 1; for a count or a score that is never what was meant.
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


_Number = BeforeValidator(_no_bool)


class ToolInput(BaseModel):
    """One agent tool: its arguments (unknown ones are errors, never dropped) and what agents see."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True)
    name: ClassVar[str]
    description: ClassVar[str]
    #: one line for `memoryd mcp --help`
    summary: ClassVar[str]
    #: no side effects: hosts may call it without asking the user
    read_only: ClassVar[bool] = True


class MemorySearchInput(ToolInput):
    name = "memory_search"
    description = (
        "Mandatory recall step: search MEMORY.md and memory/*.md (hybrid BM25 + vectors) "
        "before answering questions about prior work, decisions, dates, people, preferences "
        "or todos. Returns the top snippets with path and line range; read more of a hit "
        "with memory_get."
    )
    summary = "hybrid search; returns snippets with path and line range"
    query: str = Field(
        description="What to look for, in natural language or keywords "
        f"(1–{MAX_QUERY_CHARS} characters).",
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        pattern=r"\S",
    )
    max_results: Annotated[int | None, _Number] = Field(
        None,
        alias="maxResults",
        ge=1,
        le=MAX_RESULTS_LIMIT,
        description="Most results to return (default from config, usually 6).",
    )
    min_score: Annotated[float | None, _Number] = Field(
        None,
        alias="minScore",
        ge=0,
        le=1,
        description="Drop results scoring below this (0–1; default from config, usually 0.35).",
    )
    corpus: Corpus = Field(
        "all",
        description="What to search: 'memory' (MEMORY.md, memory/**.md, extra paths), "
        "'sessions' (past session transcripts, when enabled) or 'all' (every configured "
        "source, the default).",
    )
    session_key: str | None = Field(
        None,
        alias="sessionKey",
        description="The calling session's key (e.g. agent:main:main); scope rules and "
        "citations follow it.",
    )
    explain: StrictBool = Field(
        False,
        description="Give each result an `explain` object: how its score and place were "
        "computed (keyword and vector evidence, fusion, calibration, boosts, rerank).",
    )


class MemoryGetInput(ToolInput):
    name = "memory_get"
    description = (
        "Read a memory file (MEMORY.md, memory/**.md, configured extra paths) or a line "
        "range of it (from, lines). Use after memory_search to pull only the lines needed."
    )
    summary = "read a memory file or a line range of it"
    path: str = Field(
        description="Workspace-relative path from a search hit (e.g. memory/2026-11-29.md).",
        min_length=1,
        pattern=r"\S",
    )
    from_line: Annotated[int | None, _Number] = Field(
        None, alias="from", ge=1, description="First line to read, 1-based (default 1)."
    )
    lines: Annotated[int | None, _Number] = Field(
        None, ge=1, description="How many lines to read (default: to the end of the file)."
    )
    corpus: Corpus = Field(
        "memory",
        description="Where the path lives: 'memory', 'sessions' or 'all' (see memory_search).",
    )


class MemoryAppendInput(ToolInput):
    name = "memory_append"
    description = (
        "Write durable notes: target 'daily' appends to today's memory/YYYY-MM-DD.md, "
        "'long-term' to MEMORY.md (decisions, preferences, lasting facts)."
    )
    summary = "append notes to today's daily file or to MEMORY.md"
    read_only = False
    target: Literal["daily", "long-term"] = Field(
        description="'daily' appends to today's memory/YYYY-MM-DD.md; 'long-term' to MEMORY.md."
    )
    text: str = Field(
        description="Markdown to append (at most 64 KiB per call).", min_length=1, pattern=r"\S"
    )


class MemoryContextInput(ToolInput):
    name = "memory_context"
    description = (
        "The memory to load at session start: today's and yesterday's daily notes, and "
        "MEMORY.md for private sessions."
    )
    summary = "what to load at session start"
    session_key: str | None = Field(
        None,
        alias="sessionKey",
        description="The session's key; group and channel sessions get no MEMORY.md.",
    )


class MemoryFlushCheckInput(ToolInput):
    name = "memory_flush_check"
    description = (
        "Before compaction: should the silent memory-flush turn run now? Returns run, "
        "reason and the prompts to use."
    )
    summary = "should the pre-compaction memory flush run now?"
    read_only = False
    token_estimate: Annotated[int, _Number] = Field(
        alias="tokenEstimate", ge=0, description="The session's current token count (estimate)."
    )
    context_window: Annotated[int, _Number] = Field(
        alias="contextWindow", ge=1, description="The model's context window, in tokens."
    )
    compaction_count: Annotated[int, _Number] = Field(
        0, alias="compactionCount", ge=0, description="Compactions so far in this session."
    )
    session_key: str | None = Field(
        None, alias="sessionKey", description="The session's key (one flush per compaction)."
    )
    session_id: str | None = Field(
        None,
        alias="sessionId",
        description="The host's session id (tells a reset session apart from the old one).",
    )


class MemoryStatusInput(ToolInput):
    name = "memory_status"
    description = "Which backend serves memory (qmd or built-in), index health and recent failures."
    summary = "backend, index health and recent failures"


TOOLS: Final[dict[str, type[ToolInput]]] = {
    tool.name: tool
    for tool in (
        MemorySearchInput,
        MemoryGetInput,
        MemoryAppendInput,
        MemoryContextInput,
        MemoryFlushCheckInput,
        MemoryStatusInput,
    )
}


class _ToolSchema(GenerateJsonSchema):
    """Schemas without titles, and optional arguments without `null` (an explicit `null` is
    read as omitted, but only the real type is advertised, as OpenClaw's schemas do)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        out = super().model_schema(schema)
        out.pop("title", None)
        return out

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        out = super().default_schema(schema)
        if out.get("default", ...) is None:
            del out["default"]
        return out


def input_schema(tool_name: str) -> dict[str, Any]:
    """The JSON schema of `tool_name`'s arguments (camelCase names, bounds, no extra keys)."""
    schema = TOOLS[tool_name].model_json_schema(by_alias=True, schema_generator=_ToolSchema)
    schema.setdefault("properties", {})
    return schema


def validate_tool_input(tool_name: str, arguments: dict[str, Any] | None) -> ToolInput:
    """One tool call's arguments validated by their wire names only (`maxResults`, `from`, …);
    `InvalidInput` with one readable line."""
    tool = TOOLS.get(tool_name)
    if tool is None:
        raise InvalidInput(f"unknown tool {tool_name!r} (tools: {', '.join(TOOLS)})")
    if not isinstance(arguments, dict | None):
        raise InvalidInput(f"{tool_name} arguments must be an object")
    try:
        return tool.model_validate(arguments or {}, by_alias=True, by_name=False)
    except ValidationError as err:
        errors = err.errors(include_url=False)
    unknown = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden"]
    problems = [_unknown_arguments(tool, unknown)] if unknown else []
    problems += [_describe(e) for e in errors if e["type"] != "extra_forbidden"]
    raise InvalidInput("; ".join(dict.fromkeys(problems)))


def _unknown_arguments(tool: type[ToolInput], unknown: list[str]) -> str:
    names = [f.alias or name for name, f in tool.model_fields.items()]
    if len(unknown) == 1:
        arg = unknown[0]
        close = [n for n in names if n.lower() == arg.lower()] or difflib.get_close_matches(
            arg, names, n=1, cutoff=0.6
        )
        if close:
            return f"unknown argument {arg!r} (did you mean {close[0]!r}?)"
        what = f"unknown argument {arg!r}"
    else:
        what = "unknown arguments " + ", ".join(repr(a) for a in unknown)
    if not names:
        return f"{what}: {tool.name} takes no arguments"
    return f"{what}: {tool.name} takes {', '.join(names)}"


_INTEGER = "{arg} must be an integer (got {got!r})"
_NUMBER = "{arg} must be a number (got {got!r})"
# every pattern here is r"\S": the only way to miss it is an empty or blank string
_EMPTY = "{arg} must not be empty"
#: One line per pydantic error type, filled in from the error's context (bounds read `:g`: 1.0 is 1).
_MESSAGES: Final = {
    "missing": "{arg} is required",
    "greater_than_equal": "{arg} must be ≥ {ge:g} (got {got!r})",
    "greater_than": "{arg} must be > {gt:g} (got {got!r})",
    "less_than_equal": "{arg} must be ≤ {le:g} (got {got!r})",
    "less_than": "{arg} must be < {lt:g} (got {got!r})",
    "string_too_short": _EMPTY,
    "string_pattern_mismatch": _EMPTY,
    "string_too_long": "{arg} must be at most {max_length} characters (got {size})",
    "int_type": _INTEGER,
    "int_parsing": _INTEGER,
    "int_from_float": _INTEGER,
    "float_type": _NUMBER,
    "float_parsing": _NUMBER,
    "finite_number": _NUMBER,
    "string_type": "{arg} must be a string (got {kind})",
    "literal_error": "{arg} must be one of {expected} (got {got!r})",
    "value_error": "{arg} {error}",
}


def _describe(e: ErrorDetails) -> str:
    got = e.get("input")
    return _MESSAGES.get(e["type"], "{arg}: {msg}").format(
        **e.get("ctx", {}),
        arg=".".join(str(p) for p in e["loc"]) or "arguments",
        got=got,
        size=len(got) if isinstance(got, str) else None,
        kind=type(got).__name__,
        msg=e["msg"],
    )


def tools_help() -> str:
    """The tool list for `memoryd mcp --help`: each tool's arguments and what it does."""
    width = max(len(name) for name in TOOLS)
    lines = ["tools:"]
    for tool in TOOLS.values():
        args = [
            (f.alias or name) + ("" if f.is_required() else "?")
            for name, f in tool.model_fields.items()
        ]
        lines.append(f"  {tool.name:<{width}}  {{{', '.join(args)}}}")
        lines.append(f"  {'':<{width}}  {tool.summary}")
    return "\n".join(lines)


def call_tool(service: Any, args: ToolInput, *, agent_id: str | None) -> dict[str, Any]:
    """Run a validated tool call (MCP and the serve socket) as the service method the tool is
    named after, with the model's fields as its keywords: a failure is a result, never raised."""
    fields = args.model_dump()
    try:
        if isinstance(args, MemoryGetInput) and fields.pop("corpus") == "sessions":
            raise InvalidInput(
                "memory_get reads memory files only: session transcripts are searchable "
                "(corpus 'sessions') but never readable"
            )
        out = getattr(service, args.name.removeprefix("memory_"))(**fields, agent_id=agent_id)
        return out if isinstance(out, dict) else out.to_dict()
    except MemorydError as err:
        if isinstance(args, MemorySearchInput):
            return err.to_result(results=[])
        if isinstance(args, MemoryGetInput):
            return err.to_result(path=args.path, text="")
        return err.to_result()
