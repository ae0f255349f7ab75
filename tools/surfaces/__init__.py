"""The capabilities of :mod:`shardplan.tools.api` wrapped for other agents: an MCP server and LangChain tools."""
