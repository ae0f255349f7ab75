"""The GPU catalog and clusters: bundled datasheet figures, or the user's own YAML."""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shardplan.contracts.hardware import GPU, Cluster, DecodePool
from shardplan.contracts.units import rename_old_fields
from shardplan.errors import InputError
from shardplan.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES, MAX_YAML_BYTES, check_count
from shardplan.reading import parse_yaml_text, read_text
from shardplan.text import counted, one_line

__all__ = ["gpu_catalog", "get_gpu", "make_cluster", "load_cluster", "cluster_for", "with_decode_pool"]

_ALIASES = {
    "H100-SXM": "H100",
    "H100SXM": "H100",
    "H100-80GB": "H100",
    "H200-SXM": "H200",
    "A100-80GB": "A100",
    "A100-SXM": "A100",
    "A100-SXM4-80GB": "A100",
    "A100-40G": "A100-40GB",
    "A100-SXM4-40GB": "A100-40GB",
    "A10040GB": "A100-40GB",
    "H100PCIE": "H100-PCIE",
    "H100-PCIE-80GB": "H100-PCIE",
    "B200-SXM": "B200",
    "GB200-NVL72": "GB200",
}


@lru_cache(maxsize=1)
def gpu_catalog() -> dict[str, GPU]:
    """The bundled GPUs by short name (H100, H200, B200, A100, L40S, MI300X, A100-40GB, H100-PCIe, H20, GB200)."""
    import yaml

    raw = yaml.safe_load((resources.files("shardplan.tools") / "data" / "gpus.yaml").read_text())
    return {name: GPU(name=name, **fields) for name, fields in raw["gpus"].items()}


def get_gpu(name: str) -> GPU:
    """A catalog GPU by short name, any case.

    Raises:
        InputError: unknown GPU; the message lists the catalog.

    >>> get_gpu("h100").memory_gb
    80.0
    """
    catalog = gpu_catalog()
    if not name.strip():
        raise InputError("the GPU name is empty", field="gpu", fix=f"name one of {', '.join(catalog)}")
    key = name.strip().upper()
    key = _ALIASES.get(key, key)
    for short, gpu in catalog.items():
        if short.upper() == key:
            return gpu
    close = difflib.get_close_matches(key, list(catalog), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    raise InputError(
        f"unknown GPU '{one_line(name, 80)}'",
        field="gpu",
        fix=f"{hint}the catalog has {', '.join(catalog)}; describe another one with --cluster FILE",
    )


def make_cluster(gpu: str | GPU, gpus: int, gpus_per_node: int | None = None) -> Cluster:
    """A cluster of ``gpus`` catalog GPUs, ``gpus_per_node`` to a node (the GPU's usual node size by default).

    Raises:
        InputError: a count that is not positive, or GPUs that do not fill whole nodes.
    """
    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu
    if gpus < 1:
        raise InputError(f"gpus={gpus} is not positive", field="gpus", fix="give at least 1 GPU")
    check_count("gpus", gpus, MAX_GPUS)
    # 0 is a value given, not an absent one: it is refused rather than replaced by the usual node size.
    per_node = spec.gpus_per_node if gpus_per_node is None else gpus_per_node
    if per_node < 1:
        raise InputError(f"gpus_per_node={per_node} is not positive", field="gpus_per_node", fix="give at least 1")
    check_count("gpus_per_node", per_node, MAX_GPUS_PER_NODE)
    if gpus <= per_node:
        per_node, nodes = gpus, 1
    elif gpus % per_node:
        raise InputError(
            f"gpus={gpus} does not fill whole nodes of {per_node}",
            field="gpus",
            fix=f"use a multiple of {counted(per_node, 'GPU')} or set --gpus-per-node",
        )
    else:
        nodes = gpus // per_node
    return Cluster(
        name=f"{nodes}x{per_node} {spec.name}",
        gpu=spec,
        gpus_per_node=per_node,
        nodes=nodes,
        intra_node_bandwidth_gb_per_s=spec.intra_node_bandwidth_gb_per_s,
        intra_node_latency_us=spec.intra_node_latency_us,
        inter_node_bandwidth_gb_per_s=spec.inter_node_bandwidth_gb_per_s,
        inter_node_latency_us=spec.inter_node_latency_us,
    )


def with_decode_pool(cluster: Cluster, decode_gpu: str | GPU, decode_gpus: int | None = None) -> Cluster:
    """``cluster`` with its split deployments' decode workers on ``decode_gpu`` (up to ``decode_gpus`` of the
    cluster's GPUs, or any share of them), each pool on nodes of its own type.

    The link between the pools is the network between a node of each type: its figures are the slower of the two
    GPUs' catalog NICs (a node's NIC serves only its own GPUs), unless the cluster's own are lower.

    Raises:
        InputError: unknown GPU, or a decode pool that leaves no prefill GPU or splits a node.

    >>> mixed = with_decode_pool(make_cluster("H200", 16), "H100")
    >>> mixed.pool("decode").gpu.name, mixed.pool("prefill").gpu.name, mixed.inter_node_bandwidth_gb_per_s
    ('H100', 'H200', 50.0)
    """
    try:
        spec = get_gpu(decode_gpu) if isinstance(decode_gpu, str) else decode_gpu
    except InputError as exc:
        raise InputError(f"decode GPU: {str(exc).split('; ')[0]}", field="decode_gpu", fix=exc.fix) from None
    if decode_gpus is not None:
        if decode_gpus < 1:
            raise InputError(f"decode_gpus={decode_gpus} is not positive", field="decode_gpus",
                             fix="give the decode pool at least 1 GPU, or leave it out for any share")
        check_count("decode_gpus", decode_gpus, MAX_GPUS)
    pool = {"gpu": spec, "gpus": decode_gpus, "intra_node_bandwidth_gb_per_s": spec.intra_node_bandwidth_gb_per_s,
            "intra_node_latency_us": spec.intra_node_latency_us}
    link = {
        "inter_node_bandwidth_gb_per_s": min(cluster.inter_node_bandwidth_gb_per_s, spec.inter_node_bandwidth_gb_per_s),
        "inter_node_latency_us": max(cluster.inter_node_latency_us, spec.inter_node_latency_us),
    }
    name = cluster.name if cluster.mixed else f"{cluster.name} + {spec.name} decode pool"
    try:
        return Cluster.model_validate(
            cluster.model_dump() | link | {"decode_pool": DecodePool.model_validate(pool), "name": name}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(
            str(first["msg"]).removeprefix("Value error, "),
            field="decode_gpus",
            fix=f"leave the prefill pool at least one GPU, and give each pool whole nodes of {cluster.gpus_per_node}",
        ) from None


def load_cluster(path: str | Path) -> Cluster:
    """A cluster from YAML: ``gpu`` names a catalog GPU (or is a mapping describing one), link figures optional.

    Raises:
        InputError: unreadable file, unknown GPU, or a wrong field (named in the message).
    """
    file = Path(path)
    what, fix = f"cluster file {one_line(str(path), 200)}", "give a YAML file with gpu, gpus_per_node and nodes"
    text = read_text(file, what=what, field="cluster", fix=fix, limit=MAX_YAML_BYTES)
    raw: Any = parse_yaml_text(text, what=what, field="cluster", fix=fix)
    if not isinstance(raw, dict) or "gpu" not in raw:
        raise InputError(
            f"cluster file {file} has no 'gpu' key",
            field="cluster.gpu",
            fix="add gpu: H100 (a catalog name) or a mapping with the GPU's figures",
        )
    try:
        # Old link names first, so the GPU's defaults below do not collide with a figure given under one.
        fields = dict(rename_old_fields(raw, "cluster"))
    except ValueError as exc:
        raise InputError(str(exc), field="cluster", fix="see shardplan schema cluster for the fields") from None
    gpu_field = fields.pop("gpu")
    try:
        gpu = get_gpu(gpu_field) if isinstance(gpu_field, str) else GPU.model_validate(gpu_field)
    except ValidationError as exc:
        raise _field_error(exc, "cluster.gpu") from None
    for key in (
        "intra_node_bandwidth_gb_per_s",
        "intra_node_latency_us",
        "inter_node_bandwidth_gb_per_s",
        "inter_node_latency_us",
    ):
        fields.setdefault(key, getattr(gpu, key))
    fields.setdefault("gpus_per_node", gpu.gpus_per_node)
    fields.setdefault("nodes", 1)
    fields.setdefault("name", file.stem)
    decode = fields.pop("decode_pool", None)
    try:
        cluster = Cluster(gpu=gpu, **{str(k): v for k, v in fields.items()})
    except ValidationError as exc:
        raise _field_error(exc, "cluster") from None
    if decode is not None:
        cluster = _with_file_pool(cluster, decode)
    check_count("nodes", cluster.nodes, MAX_NODES)
    check_count("gpus_per_node", cluster.gpus_per_node, MAX_GPUS_PER_NODE)
    check_count("gpus", cluster.world_size, MAX_GPUS)
    return cluster


def _with_file_pool(cluster: Cluster, decode: Any) -> Cluster:
    """``cluster`` with the decode pool a cluster file describes: ``decode_pool: {gpu: H100, gpus: 8}``, its own
    scale-up link figures optional (the GPU's by default); the cluster's network joins the pools as given.

    Raises:
        InputError: a pool without a GPU, an unknown field, or counts that leave no prefill GPU.
    """
    fix = "write decode_pool: {gpu: H100, gpus: 8} (gpus optional: any share of the cluster)"
    if not isinstance(decode, dict) or "gpu" not in decode:
        raise InputError("the cluster file's decode_pool has no gpu", field="cluster.decode_pool.gpu", fix=fix)
    fields = dict(decode)
    gpu_field = fields.pop("gpu")
    try:
        gpu = get_gpu(gpu_field) if isinstance(gpu_field, str) else GPU.model_validate(gpu_field)
    except ValidationError as exc:
        raise _field_error(exc, "cluster.decode_pool.gpu") from None
    fields.setdefault("intra_node_bandwidth_gb_per_s", gpu.intra_node_bandwidth_gb_per_s)
    fields.setdefault("intra_node_latency_us", gpu.intra_node_latency_us)
    try:
        pool = DecodePool(gpu=gpu, **{str(k): v for k, v in fields.items()})
        return Cluster.model_validate(cluster.model_dump() | {"decode_pool": pool})
    except ValidationError as exc:
        raise _field_error(exc, "cluster.decode_pool") from None


def _checked(cluster: Cluster) -> Cluster:
    """``cluster`` validated again after a change of its size.

    Raises:
        InputError: the change breaks it (a decode pool that leaves no prefill GPU).
    """
    try:
        return Cluster.model_validate(cluster.model_dump())
    except ValidationError as exc:
        raise _field_error(exc, "cluster") from None


def _field_error(exc: ValidationError, prefix: str) -> InputError:
    first = exc.errors()[0]
    where = ".".join([prefix, *(str(p) for p in first["loc"])])
    message = str(first["msg"]).removeprefix("Value error, ")
    return InputError(f"{where}: {message}", field=where, fix="see shardplan schema cluster for the fields")


def cluster_for(
    gpu: str | None,
    gpus: int | None,
    gpus_per_node: int | None,
    cluster_file: str | Path | None,
    decode_gpu: str | None = None,
    decode_gpus: int | None = None,
) -> Cluster:
    """The cluster a request describes: a cluster file (optionally only ``gpus`` of it), or ``gpus`` catalog GPUs;
    with ``decode_gpu``, split deployments' decode workers on that GPU type (``decode_gpus`` of the ``gpus`` at
    most, or any share), the prefill workers on ``gpu`` (:func:`with_decode_pool`).

    A cluster file replaces ``gpu`` and ``gpus_per_node``; giving a different value for either is an error,
    not silently ignored. ``gpus`` may ask for whole nodes of the file's cluster or part of one node.

    Raises:
        InputError: unreadable file, contradicting options, a count that does not fit, or a missing GPU/count.
    """
    if decode_gpus is not None and decode_gpu is None:
        raise InputError("decode_gpus without decode_gpu", field="decode_gpus",
                         fix="name the decode pool's GPU type with --decode-gpu, or leave out --decode-gpus")
    where = _one_type_cluster(gpu, gpus, gpus_per_node, cluster_file)
    if where.decode_pool is not None and gpus is not None:
        where = _checked(where)  # part of a two-type cluster file: its decode pool must still leave prefill GPUs
    if decode_gpu is None:
        return where
    if where.decode_pool is not None:
        given = get_gpu(decode_gpu)
        if given.name != where.decode_pool.gpu.name:
            raise InputError(
                f"--decode-gpu {decode_gpu} contradicts the cluster file, whose decode pool holds "
                f"{where.decode_pool.gpu.name}",
                field="decode_gpu",
                fix="leave out --decode-gpu when giving --cluster with a decode_pool",
            )
        if decode_gpus is None or decode_gpus == where.decode_pool.gpus:
            return where
        return with_decode_pool(where, given, decode_gpus)
    return with_decode_pool(where, decode_gpu, decode_gpus)


def _one_type_cluster(
    gpu: str | None, gpus: int | None, gpus_per_node: int | None, cluster_file: str | Path | None
) -> Cluster:
    """:func:`cluster_for` before any decode pool given by options (a cluster file's own is kept)."""
    if cluster_file is None:
        if gpu is None:
            raise InputError("no GPU given", field="gpu", fix="give --gpu (e.g. H100) or --cluster FILE")
        if gpus is None:
            raise InputError("no GPU count given", field="gpus", fix="give --gpus N")
        return make_cluster(gpu, gpus, gpus_per_node)
    where = load_cluster(cluster_file)
    if gpu is not None and get_gpu(gpu).name != where.gpu.name:
        raise InputError(
            f"--gpu {gpu} contradicts the cluster file, which holds {where.gpu.name}",
            field="gpu",
            fix="leave out --gpu when giving --cluster",
        )
    if gpus is None or gpus == where.world_size:
        return where
    per_node = where.gpus_per_node
    if gpus_per_node is not None and gpus_per_node != per_node and gpus >= per_node:
        raise InputError(
            f"--gpus-per-node {gpus_per_node} contradicts the cluster file ({per_node} per node)",
            field="gpus_per_node",
            fix="leave out --gpus-per-node when giving --cluster",
        )
    if 1 <= gpus < per_node:
        return where.model_copy(update={"gpus_per_node": gpus, "nodes": 1})
    if gpus >= 1 and gpus % per_node == 0 and gpus <= where.world_size:
        return where.model_copy(update={"nodes": gpus // per_node})
    raise InputError(
        f"--gpus {gpus} does not fit the cluster file's {counted(where.nodes, 'node')} of {counted(per_node, 'GPU')}",
        field="gpus",
        fix=f"give whole nodes (a multiple of {per_node}) up to {where.world_size}, or leave out --gpus",
    )
