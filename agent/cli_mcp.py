"""``shardplan mcp``: serve the planning tools to other agents over the Model Context Protocol.

stdio (the default) is what desktop MCP clients launch; ``--transport http`` serves streamable HTTP at
``http://127.0.0.1:8765/mcp``. The server lives in :mod:`shardplan.tools.mcp_server`, imported inside the
command so that ``shardplan --help`` does not load the MCP SDK.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from .cli import app, fail

__all__ = ["mcp_command"]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


@app.command("mcp")
def mcp_command(
    transport: Annotated[str, typer.Option("--transport", "-t", help="stdio (for MCP clients that launch the server) "
                                                                      "or http (streamable HTTP).")] = "stdio",
    host: Annotated[str, typer.Option("--host", help="Address to bind with --transport http.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", "-p", help="Port to listen on with --transport http.")] = 8765,
) -> None:
    """Serve plan, build_dag, validate_dag, estimate_cost and the other tools as an MCP server."""
    from ..tools.mcp_server import HTTP_PATH, serve

    kind = transport.strip().lower()
    if kind not in ("stdio", "http"):
        fail(f"unknown transport '{transport}'; choose stdio or http")
    if not 1 <= port <= 65535:
        fail(f"port {port} is out of range; choose a port in 1..65535")
    if kind == "http":
        # stdout stays quiet under stdio (it carries the protocol); under HTTP one line says where to connect.
        where = f"[{host}]" if ":" in host else host
        sys.stderr.write(f"shardplan MCP server: streamable HTTP at http://{where}:{port}{HTTP_PATH} (Ctrl-C stops)\n")
        if host not in _LOOPBACK:
            sys.stderr.write(f"warning: listening on {host} without authentication; anyone who reaches this port "
                             "can call the tools\n")
    try:
        serve("http" if kind == "http" else "stdio", host=host, port=port)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
