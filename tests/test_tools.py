"""The tool input contract: what each tool accepts, the one-line message for what it rejects,
and JSON schemas that say exactly what the models enforce."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from memoryd.errors import InvalidInput
from memoryd.tools import (
    MAX_QUERY_CHARS,
    MAX_RESULTS_LIMIT,
    TOOLS,
    MemoryFlushCheckInput,
    MemoryGetInput,
    MemorySearchInput,
    input_schema,
    tools_help,
    validate_tool_input,
)

REJECTED: list[tuple[str, dict[str, Any], str]] = [
    # the values MCP used to accept although the CLI rejects them
    ("memory_search", {"query": "deploy", "maxResults": 0}, "maxResults must be ≥ 1 (got 0)"),
    ("memory_search", {"query": "deploy", "minScore": 2}, "minScore must be ≤ 1 (got 2)"),
    ("memory_search", {"query": "deploy", "minScore": -0.1}, "minScore must be ≥ 0 (got -0.1)"),
    (
        "memory_search",
        {"query": "deploy", "maxResults": MAX_RESULTS_LIMIT + 1},
        f"maxResults must be ≤ {MAX_RESULTS_LIMIT} (got {MAX_RESULTS_LIMIT + 1})",
    ),
    # unknown arguments are named, never ignored
    (
        "memory_search",
        {"query": "deploy", "bogus": 1},
        "unknown argument 'bogus': memory_search takes query, maxResults, minScore, corpus, "
        "sessionKey",
    ),
    (
        "memory_search",
        {"query": "deploy", "bogus": 1, "dryRun": True},
        "unknown arguments 'bogus', 'dryRun': memory_search takes",
    ),
    (
        "memory_search",
        {"query": "deploy", "maxResult": 3},
        "unknown argument 'maxResult' (did you mean 'maxResults'?)",
    ),
    (
        "memory_search",
        {"query": "deploy", "max_results": 3},
        "unknown argument 'max_results' (did you mean 'maxResults'?)",
    ),
    (
        "memory_search",
        {"query": "deploy", "sessionkey": "agent:main:main"},
        "unknown argument 'sessionkey' (did you mean 'sessionKey'?)",
    ),
    ("memory_get", {"path": "MEMORY.md", "form": 2}, "(did you mean 'from'?)"),
    ("memory_status", {"verbose": True}, "unknown argument 'verbose': memory_status takes no"),
    # shapes and types
    ("memory_search", {}, "query is required"),
    ("memory_search", {"query": ""}, "query must not be empty"),
    ("memory_search", {"query": " \n\t"}, "query must not be empty"),
    (
        "memory_search",
        {"query": "x" * (MAX_QUERY_CHARS + 1)},
        f"query must be at most {MAX_QUERY_CHARS} characters (got {MAX_QUERY_CHARS + 1})",
    ),
    ("memory_search", {"query": 42}, "query must be a string (got int)"),
    ("memory_search", {"query": "x", "maxResults": "six"}, "maxResults must be an integer"),
    ("memory_search", {"query": "x", "maxResults": 2.5}, "maxResults must be an integer"),
    ("memory_search", {"query": "x", "maxResults": True}, "maxResults must be a number, not a"),
    ("memory_search", {"query": "x", "minScore": "high"}, "minScore must be a number"),
    ("memory_search", {"query": "x", "corpus": "files"}, "corpus must be one of 'memory',"),
    ("memory_get", {"path": "  "}, "path must not be empty"),
    ("memory_get", {"path": "MEMORY.md", "from": 0}, "from must be ≥ 1 (got 0)"),
    ("memory_get", {"path": "MEMORY.md", "lines": 0}, "lines must be ≥ 1 (got 0)"),
    (
        "memory_get",
        {"path": "MEMORY.md", "from": 0, "lines": -1},
        "from must be ≥ 1 (got 0); lines must be ≥ 1 (got -1)",
    ),
    ("memory_append", {"text": "x"}, "target is required"),
    ("memory_append", {"target": "weekly", "text": "x"}, "target must be one of 'daily' or"),
    ("memory_append", {"target": "daily", "text": ""}, "text must not be empty"),
    (
        "memory_flush_check",
        {"tokenEstimate": -1, "contextWindow": 200_000},
        "tokenEstimate must be ≥ 0 (got -1)",
    ),
    (
        "memory_flush_check",
        {"tokenEstimate": 1, "contextWindow": 0},
        "contextWindow must be ≥ 1 (got 0)",
    ),
    (
        "memory_flush_check",
        {"tokenEstimate": 1, "contextWindow": 10, "compactionCount": -2},
        "compactionCount must be ≥ 0 (got -2)",
    ),
    ("memory_flush_check", {"contextWindow": 10}, "tokenEstimate is required"),
    ("memory_context", {"sessionKey": 7}, "sessionKey must be a string (got int)"),
]


@pytest.mark.parametrize(
    ("tool", "args", "message"), REJECTED, ids=[f"{t}-{m[:40]}" for t, _, m in REJECTED]
)
def test_bad_input_is_one_readable_line_naming_the_argument(
    tool: str, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_tool_input(tool, args)
    text = str(caught.value)
    assert message in text
    assert "\n" not in text
    assert "pydantic" not in text and "http" not in text  # no pydantic doc link


@pytest.mark.parametrize(("tool", "args", "message"), REJECTED[:8])
def test_the_schema_rejects_what_the_model_rejects(
    tool: str, args: dict[str, Any], message: str
) -> None:
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(args, input_schema(tool))


ACCEPTED: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    (
        "memory_search",
        {"query": "webhook secret"},
        {"query": "webhook secret", "max_results": None, "min_score": None, "corpus": "all"},
    ),
    (
        "memory_search",
        {"query": "q", "maxResults": 1, "minScore": 0, "sessionKey": "agent:main:main"},
        {"max_results": 1, "min_score": 0.0, "session_key": "agent:main:main"},
    ),
    (
        "memory_search",
        {"query": "q", "maxResults": MAX_RESULTS_LIMIT, "minScore": 1, "corpus": "all"},
        {"max_results": MAX_RESULTS_LIMIT, "min_score": 1.0, "corpus": "all"},
    ),
    # an explicit null reads like an omitted argument; a numeric string like its number
    ("memory_search", {"query": "q", "maxResults": None}, {"max_results": None}),
    ("memory_search", {"query": "q", "maxResults": "3"}, {"max_results": 3}),
    ("memory_search", {"query": "x" * MAX_QUERY_CHARS}, {"query": "x" * MAX_QUERY_CHARS}),
    (
        "memory_get",
        {"path": "MEMORY.md", "from": 2, "lines": 1},
        {"path": "MEMORY.md", "from_line": 2, "lines": 1},
    ),
    ("memory_append", {"target": "long-term", "text": "- x"}, {"target": "long-term"}),
    ("memory_context", {}, {"session_key": None}),
    (
        "memory_flush_check",
        {"tokenEstimate": 0, "contextWindow": 1},
        {"token_estimate": 0, "context_window": 1, "compaction_count": 0},
    ),
    ("memory_status", {}, {}),
]


@pytest.mark.parametrize(("tool", "args", "fields"), ACCEPTED)
def test_good_input_maps_to_snake_case_fields(
    tool: str, args: dict[str, Any], fields: dict[str, Any]
) -> None:
    model = validate_tool_input(tool, args)
    assert isinstance(model, TOOLS[tool])
    for name, value in fields.items():
        assert getattr(model, name) == value


# The models are laxer than the schemas on purpose: null and numeric strings, which some
# clients send, are read; the schemas advertise only the real types.
LAX_ONLY = ({"query": "q", "maxResults": None}, {"query": "q", "maxResults": "3"})


@pytest.mark.parametrize(("tool", "args"), [(t, a) for t, a, _ in ACCEPTED if a not in LAX_ONLY])
def test_the_schema_accepts_what_the_model_accepts(tool: str, args: dict[str, Any]) -> None:
    jsonschema.validate(args, input_schema(tool))


def test_python_callers_may_use_field_names() -> None:
    # the socket server and the CLI build inputs in Python, with snake_case names
    assert MemorySearchInput(query="q", max_results=2).max_results == 2
    assert MemoryGetInput(path="MEMORY.md", from_line=3).from_line == 3
    assert MemoryFlushCheckInput(token_estimate=1, context_window=2).compaction_count == 0


@pytest.mark.parametrize("tool", list(TOOLS))
def test_every_schema_forbids_extra_arguments_and_names_wire_arguments(tool: str) -> None:
    schema = input_schema(tool)
    model = TOOLS[tool]
    wire = [f.alias or n for n, f in model.model_fields.items()]
    required = [f.alias or n for n, f in model.model_fields.items() if f.is_required()]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert list(schema["properties"]) == wire
    assert schema.get("required", []) == required
    for prop in schema["properties"].values():
        assert prop["description"]
        assert "anyOf" not in prop and "title" not in prop


def test_schemas_show_the_bounds() -> None:
    search = input_schema("memory_search")["properties"]
    assert (search["maxResults"]["minimum"], search["maxResults"]["maximum"]) == (1, 100)
    assert (search["minScore"]["minimum"], search["minScore"]["maximum"]) == (0, 1)
    assert search["query"]["maxLength"] == MAX_QUERY_CHARS == 2000
    assert search["corpus"]["enum"] == ["memory", "sessions", "all"]
    get = input_schema("memory_get")["properties"]
    assert get["from"]["minimum"] == 1 and get["lines"]["minimum"] == 1
    flush = input_schema("memory_flush_check")["properties"]
    assert flush["tokenEstimate"]["minimum"] == 0 and flush["contextWindow"]["minimum"] == 1
    assert input_schema("memory_append")["properties"]["target"]["enum"] == ["daily", "long-term"]


def test_unknown_tool_and_non_object_arguments() -> None:
    with pytest.raises(InvalidInput, match="unknown tool 'memory_delete'"):
        validate_tool_input("memory_delete", {})
    with pytest.raises(InvalidInput, match="memory_search arguments must be an object"):
        validate_tool_input("memory_search", ["q"])  # type: ignore[arg-type]
    assert validate_tool_input("memory_status", None) == TOOLS["memory_status"]()


def test_invalid_input_result_is_the_documented_failure_shape() -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_tool_input("memory_search", {"query": "q", "maxResults": 0})
    assert caught.value.to_result() == {
        "disabled": True,
        "error": "maxResults must be ≥ 1 (got 0)",
        "code": "invalid_input",
    }


def test_help_lists_every_tool_with_its_arguments() -> None:
    text = tools_help()
    for spec in TOOLS.values():
        assert spec.name in text and spec.summary in text
    assert "{query, maxResults?, minScore?, corpus?, sessionKey?, explain?}" in text
