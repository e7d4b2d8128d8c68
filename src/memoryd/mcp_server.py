"""`memoryd mcp`: the agent tools over MCP (stdio), built on the official SDK.

The tools are the same contract as the Python API and the CLI: they return the service's dicts,
so errors arrive as `{disabled, error}` / `{scopeDenied, reason}` results, never as exceptions.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from . import __version__
from .orchestrator import MemoryService

INSTRUCTIONS = (
    "Long-term memory for this agent. Call memory_search before answering questions about prior "
    "work, decisions, people, preferences or dates; then memory_get to read more lines of a hit."
)


def build_server(service: MemoryService, *, agent_id: str | None = None) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("memoryd", version=__version__, instructions=INSTRUCTIONS)

    @server.tool(
        description="Search the agent's memory files (hybrid BM25 + vectors). Returns snippets with path and line range."
    )
    async def memory_search(
        query: str,
        maxResults: int | None = None,
        minScore: float | None = None,
        sessionKey: str | None = None,
    ) -> dict[str, Any]:
        return await service.memory_search(
            query,
            agent_id=agent_id,
            session_key=sessionKey,
            max_results=maxResults,
            min_score=minScore,
        )

    def memory_get_schema(
        path: str,
        from_: Annotated[int | None, Field(alias="from", description="first line, 1-based")] = None,
        lines: Annotated[int | None, Field(description="number of lines")] = None,
    ) -> dict[str, Any]:
        raise NotImplementedError  # only its signature is used, for the tool's input schema

    async def memory_get(path: str, **kw: Any) -> dict[str, Any]:
        # `from` is a Python keyword, so the SDK passes it through **kw under its alias
        return await service.memory_get(
            path, from_line=kw.get("from"), lines=kw.get("lines"), agent_id=agent_id
        )

    memory_get.__signature__ = inspect.signature(memory_get_schema, eval_str=True)  # type: ignore[attr-defined]
    memory_get.__annotations__ = memory_get_schema.__annotations__
    server.tool(
        name="memory_get",
        description="Read a memory file (MEMORY.md, memory/**.md, extra paths) or a line range of it.",
    )(memory_get)

    @server.tool(
        description="Append durable notes: target 'daily' (today's memory/YYYY-MM-DD.md) or 'long-term' (MEMORY.md)."
    )
    async def memory_append(target: Literal["daily", "long-term"], text: str) -> dict[str, Any]:
        return await service.append(target, text, agent_id=agent_id)

    @server.tool(
        description="The memory to load at session start: today's and yesterday's notes, and MEMORY.md for private sessions."
    )
    async def memory_context(sessionKey: str | None = None) -> dict[str, Any]:
        return await service.context(agent_id=agent_id, session_key=sessionKey)

    @server.tool(
        description="Before compaction: should the silent memory-flush turn run now? Returns the prompts to use."
    )
    async def memory_flush_check(
        tokenEstimate: int,
        contextWindow: int,
        compactionCount: int = 0,
        sessionKey: str | None = None,
        sessionId: str | None = None,
    ) -> dict[str, Any]:
        return await service.flush_check(
            session_key=sessionKey,
            token_estimate=tokenEstimate,
            context_window=contextWindow,
            compaction_count=compactionCount,
            session_id=sessionId,
            agent_id=agent_id,
        )

    @server.tool(description="Which backend serves memory, index health and recent failures.")
    async def memory_status() -> dict[str, Any]:
        return await service.status(agent_id)

    return server
