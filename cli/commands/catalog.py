"""Catalog commands: models, gpus, traces, show-model, schema."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from shardplan.cli.app import app, console, emit_json
from shardplan.contracts.arithmetic.model_math import describe, summary
from shardplan.contracts.schemas import json_schema
from shardplan.text import counted
from shardplan.tools.catalogs.bundled import bundled_models
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.catalogs.trace_files import bundled_traces
from shardplan.tools.catalogs.weight_formats import weight_formats_text
from shardplan.tools.traffic.traces import read_trace, trace_stats

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@app.command("models")
def models_command(as_json: JsonFlag = False) -> None:
    """List the bundled models (Hugging Face ids) with their size."""

    rows: list[dict[str, Any]] = [summary(load_model(repo)) for repo in bundled_models()]
    if as_json:
        emit_json(rows)
        return
    from rich.table import Table

    table = Table("model", "type", "layers", "total", "active")
    for row in rows:
        table.add_row(
            row["name"],
            row["architecture"],
            str(row["layers"]),
            f"{row['params_total'] / 1e9:.1f}B",
            f"{row['params_active'] / 1e9:.1f}B",
        )
    console().print(table)


@app.command("gpus")
def gpus_command(as_json: JsonFlag = False) -> None:
    """List the GPU catalog with datasheet figures."""

    catalog = gpu_catalog()
    if as_json:
        emit_json({name: gpu.model_dump(mode="json") for name, gpu in catalog.items()})
        return
    from rich.table import Table

    table = Table("gpu", "memory", "HBM GB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "link GB/s", "net GB/s")
    for name, gpu in catalog.items():
        fp8 = gpu.dense_tflops.get("fp8")
        table.add_row(
            name,
            f"{gpu.memory_gb:g} GB",
            f"{gpu.memory_bandwidth_gb_per_s:g}",
            f"{gpu.dense_tflops.get('bf16', 0):g}",
            f"{fp8:g}" if fp8 else "-",
            f"{gpu.intra_node_bandwidth_gb_per_s:g}",
            f"{gpu.inter_node_bandwidth_gb_per_s:g}",
        )
    console().print(table)


@app.command("traces")
def traces_command(as_json: JsonFlag = False) -> None:
    """List the bundled request traces (--workload NAME) with their lengths and rate.

    Each is a sample of a public production trace; tools/data/traces/README.md gives its source, license and
    sampling. Input and output lengths are in tokens (mean, median, 99th percentile); the rate is requests per
    second over the trace's span (--json adds the span).
    """

    rows = [{**trace_stats(read_trace(name)), "file": file_name} for name, file_name in bundled_traces().items()]
    if as_json:
        emit_json(rows)
        return
    from rich.table import Table

    table = Table("trace", "rows", "in mean", "p50", "p99", "out mean", "p50", "p99", "req/s")
    for row in rows:
        rate = row["rate_per_s"]
        lengths = [f"{row[f'{which}_{stat}']:g}" for which in ("isl", "osl") for stat in ("mean", "p50", "p99")]
        table.add_row(row["name"], f"{row['requests']:,}", *lengths, f"{rate:.2f}" if rate is not None else "-")
    console().print(table)


@app.command("show-model")
def show_model_command(
    model: Annotated[
        str, typer.Argument(help="Bundled name (meta-llama/Llama-3.1-70B, llama-3.1-70b) or path to config.json.")
    ],
    as_json: JsonFlag = False,
) -> None:
    """Show a model's architecture and derived sizes (parameters, KV bytes per token)."""

    spec = load_model(model)
    facts: dict[str, Any] = {**describe(spec), "spec": spec.model_dump(mode="json")}
    if as_json:
        emit_json(facts)
        return
    out = console()
    out.print(f"[bold]{spec.name}[/bold] ({spec.architecture})")
    out.print(
        f"  parameters   {facts['params_total'] / 1e9:.2f}B total, {facts['params_active'] / 1e9:.2f}B active"
        f", {facts['weight_bytes'] / 1e9:.1f} GB of weights ({spec.weight_dtype}"
        + (f", {parts}" if (parts := weight_formats_text(spec)) else "")
        + ")"
    )
    out.print(f"  layers       {spec.num_layers} (hidden {spec.hidden_size})")
    out.print(
        f"  attention    {facts['attention']}: {counted(spec.num_attention_heads, 'head')}, {spec.num_kv_heads} KV "
        f"heads, "
        f"head_dim {spec.head_dim}"
        + (f", {facts['sliding_layers']} sliding layers (window {spec.sliding_window})" if spec.sliding_window else "")
    )
    if spec.moe:
        out.print(
            f"  experts      {spec.moe.num_experts} routed, top-{spec.moe.experts_per_token}, "
            f"{spec.moe.num_shared_experts} shared, first {counted(spec.moe.first_dense_layers, 'layer')} dense"
        )
    out.print(f"  KV cache     {facts['kv_bytes_per_token'] / 1024:.1f} KiB per token ({spec.kv_dtype})")
    out.print(f"  FLOPs        {facts['flops_per_token'] / 1e9:.1f} GFLOP per token")
    for warning in spec.warnings:
        out.print(f"  [yellow]warning[/yellow]      {warning}")


@app.command("schema")
def schema_command(
    name: Annotated[
        str, typer.Argument(help="plan, dag, strategy, model, cluster, workload, validation, cost or simulation.")
    ],
) -> None:
    """Print the JSON Schema of a contract."""

    emit_json(json_schema(name))
