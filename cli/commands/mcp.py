"""``shardplan mcp``: serve the planning tools to other agents over the Model Context Protocol.

stdio (the default) is what desktop MCP clients launch; ``--transport http`` serves streamable HTTP at
``http://127.0.0.1:8765/mcp``. The server lives in :mod:`shardplan.tools.surfaces.mcp_server`, imported inside the
command so that ``shardplan --help`` does not load the MCP SDK.
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from shardplan.cli.app import app
from shardplan.tools.surfaces.mcp_server import serve

__all__ = ["mcp_command"]


@app.command("mcp")
def mcp_command(
    transport: Annotated[Literal["stdio", "http"], typer.Option(
        "--transport", "-t", help="stdio (for MCP clients that launch the server) or http (streamable HTTP)."),
    ] = "stdio",
    host: Annotated[str, typer.Option("--host", help="Address to bind with --transport http.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", min=1, max=65535,
                                      help="Port to listen on with --transport http.")] = 8765,
    allow_root: Annotated[list[str] | None, typer.Option(
        "--allow-root", help="A folder the tools may read model, cluster and trace files from (repeatable; "
        "SHARDPLAN_ALLOWED_ROOTS adds more). None given: no folder, only bundled names and inline content.")] = None,
) -> None:
    """Serve plan, build_dag, validate_dag, estimate_cost and the other tools as an MCP server."""

    try:
        serve(transport, host=host, port=port, allow_roots=allow_root or ())
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
