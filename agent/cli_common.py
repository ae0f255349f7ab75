"""What several commands share: turning the model, cluster and workload options into contracts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError

if TYPE_CHECKING:
    from ..tools.contracts import Cluster, DType, ModelSpec, Objective, Workload

__all__ = ["resolve_target"]


def resolve_target(
    model: str,
    gpu: str | None,
    gpus: int | None,
    gpus_per_node: int | None,
    cluster: str | Path | None,
    isl: int,
    osl: int,
    batch: int,
    ttft_ms: float | None = None,
    tpot_ms: float | None = None,
    objective: Objective = "latency",
    weight_dtype: DType | None = None,
    kv_dtype: DType | None = None,
) -> tuple[ModelSpec, Cluster, Workload]:
    """The model, cluster and workload that command-line options describe.

    ``cluster`` (a YAML file) replaces ``gpu`` and ``gpus_per_node``; ``gpus`` then defaults to the
    cluster's size and may ask for fewer whole nodes of it (or part of one node). Without ``cluster``,
    ``gpu`` and ``gpus`` are required.

    Raises:
        InputError: unknown model or GPU, unreadable cluster file, a GPU count that does not fit the
            nodes, options that contradict the cluster file, or workload figures out of range; the
            message names the option.

    >>> spec, where, load = resolve_target("llama-3.1-8b", "H100", 4, None, None, 512, 64, 1)
    >>> where.world_size, load.isl
    (4, 512)
    """
    from pydantic import ValidationError

    from ..tools.contracts import Workload
    from ..tools.hardware import get_gpu, load_cluster, make_cluster
    from ..tools.models import load_model

    spec = load_model(model, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    if cluster is not None:
        where = load_cluster(cluster)
        if gpu is not None and get_gpu(gpu).name != where.gpu.name:
            raise InputError(
                f"--gpu {gpu} contradicts the cluster file, which holds {where.gpu.name}",
                field="gpu",
                fix="leave out --gpu when giving --cluster",
            )
        if gpus_per_node is not None and gpus_per_node != where.gpus_per_node:
            raise InputError(
                f"--gpus-per-node {gpus_per_node} contradicts the cluster file "
                f"({where.gpus_per_node} per node)",
                field="gpus_per_node",
                fix="leave out --gpus-per-node when giving --cluster",
            )
        where = _part_of(where, gpus)
    else:
        if gpu is None:
            raise InputError("no GPU given", field="gpu", fix="give --gpu (e.g. H100) or --cluster FILE")
        if gpus is None:
            raise InputError("no GPU count given", field="gpus", fix="give --gpus N")
        where = make_cluster(gpu, gpus, gpus_per_node)
    try:
        load = Workload(isl=isl, osl=osl, batch=batch, ttft_ms=ttft_ms, tpot_ms=tpot_ms, objective=objective)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(p) for p in first["loc"])
        raise InputError(
            f"--{name.replace('_', '-')}={first.get('input')}: {first['msg']}",
            field=name,
            fix="give positive lengths and batch, and positive targets",
        ) from None
    return spec, where, load


def _part_of(cluster: Cluster, gpus: int | None) -> Cluster:
    """The first ``gpus`` GPUs of ``cluster``: whole nodes, or part of a single node."""
    if gpus is None or gpus == cluster.world_size:
        return cluster
    per_node = cluster.gpus_per_node
    if 1 <= gpus < per_node:
        return cluster.model_copy(update={"gpus_per_node": gpus, "nodes": 1})
    if gpus >= 1 and gpus % per_node == 0 and gpus <= cluster.world_size:
        return cluster.model_copy(update={"nodes": gpus // per_node})
    raise InputError(
        f"--gpus {gpus} does not fit the cluster file's {cluster.nodes} nodes of {per_node} GPUs",
        field="gpus",
        fix=f"give whole nodes (a multiple of {per_node}) up to {cluster.world_size}, or leave out --gpus",
    )
