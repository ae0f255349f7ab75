"""Size of MCP tool results as a client receives them: compact by default, whole with detail=true.

Run: .venv/bin/python benchmarks/mcp_result_sizes.py
Target (issue 17): a DeepSeek-V3 plan under 16 KB by default (text and structured content, as JSON bytes).
"compact" is the whole answer (text, structured content, resource link) as JSON bytes, "text" its summary
text alone; "whole as before" is what the server answered for a plan before results were compact: the whole
plan as structured content and the same JSON again as text.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from mcp import Client
from mcp_types import CallToolResult, TextContent

from shardplan.tools.surfaces.mcp_server import build_server

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("plan", {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "gpus": 16}),
    ("plan", {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "gpus": 16, "isl": 4096, "osl": 1024,
              "ttft_ms": 2000, "tpot_ms": 50, "objective": "throughput"}),
    ("plan", {"model": "Qwen/Qwen3-235B-A22B", "cluster": "tools/data/clusters/h200-2x8-ib.yaml", "gpu": "H200",
              "isl": 2048, "osl": 256, "ttft_ms": 2000, "tpot_ms": 30, "gpus": 16}),
    ("estimate_cost", {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "gpus": 8, "strategy": "tp=8,ep=2"}),
    ("search_strategies", {"model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "gpus": 16, "top": 5}),
]


def wire(result: CallToolResult) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def as_before(result: CallToolResult) -> int:
    """Bytes of the old answer: the whole result as structured content and once more as JSON text."""
    data = result.structured_content or {}
    whole = data.get("plan") or data
    old = CallToolResult(content=[TextContent(type="text", text=json.dumps(whole, separators=(",", ":")))],
                         structured_content=whole)
    return wire(old)


async def main() -> None:
    print(f"{'tool':<18} {'request':<44} {'compact':>9} {'text':>6} {'detail':>9} {'whole as before':>16}")
    async with Client(build_server(), read_timeout_seconds=120) as client:
        for name, args in CALLS:
            compact = await client.call_tool(name, args)
            detailed = await client.call_tool(name, {**args, "detail": True})
            assert not compact.is_error and not detailed.is_error, compact.content
            text = compact.content[0]
            assert isinstance(text, TextContent)
            label = ",".join(f"{k}={v}" for k, v in args.items() if k in ("model", "gpus", "strategy", "objective"))
            # Only the plan was ever answered whole; cost and search answers were compact before too.
            before = f"{as_before(detailed):,}" if name == "plan" else "-"
            print(f"{name:<18} {label[:44]:<44} {wire(compact):>9,} {len(text.text.encode()):>6,} "
                  f"{wire(detailed):>9,} {before:>16}")


if __name__ == "__main__":
    anyio.run(main)
