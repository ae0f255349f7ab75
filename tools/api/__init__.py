"""The capability layer: what the agent, LangChain tools and the MCP server can do, as plain functions.

Each capability (:mod:`.capabilities`) takes keyword arguments checked by a pydantic argument model
(``extra="forbid"``, size and range constraints, a description per field) before its body runs, and returns a
compact pydantic result an LLM can read: headline figures and the first violations, never a whole DAG unless
asked. Malformed input raises :class:`~shardplan.errors.InputError` naming the field and the fix; an
infeasible request is a result (``feasible=False``), not an exception. :data:`.registry.CAPABILITIES` lists
them all for the wrappers (:mod:`shardplan.tools.surfaces`).
"""
