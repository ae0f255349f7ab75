"""The GPU catalog, clusters built from it, and cluster YAML files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from shardplan.contracts.units import parse_gb_per_s
from shardplan.errors import InputError
from shardplan.tools.catalogs.gpus import get_gpu, gpu_catalog, load_cluster, make_cluster

CATALOG = ("H100", "H200", "B200", "A100", "L40S", "MI300X")
CLUSTER_DIR = Path(__file__).resolve().parents[1] / "tools" / "data" / "clusters"
BUNDLED_CLUSTERS = sorted(CLUSTER_DIR.glob("*.yaml"))


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_names_resolve_in_any_case(name: str) -> None:
    for spelling in (name, name.lower(), f" {name.title()} "):
        gpu = get_gpu(spelling)
        assert gpu.name == name
    assert gpu.source.strip(), f"{name} has no source for its figures"
    assert gpu.memory_gb > 0 and gpu.memory_bandwidth_gb_per_s > 0
    assert gpu.peak_flops("bf16") > 0


def test_catalog_holds_the_six() -> None:
    assert set(CATALOG) <= set(gpu_catalog())


def test_h100_datasheet_figures() -> None:
    gpu = get_gpu("H100")
    assert gpu.memory_gb == 80
    assert gpu.memory_bandwidth_gb_per_s == 3350
    assert gpu.dense_tflops["bf16"] == 989
    assert gpu.peak_flops("bf16") == 989e12
    assert gpu.peak_flops("fp8") == 1979e12


def test_b200_has_fp4() -> None:
    gpu = get_gpu("b200")
    assert "fp4" in gpu.dense_tflops
    assert gpu.peak_flops("fp4") == gpu.dense_tflops["fp4"] * 1e12
    assert gpu.peak_flops("fp4") > gpu.peak_flops("fp8") > gpu.peak_flops("bf16")


def test_a100_without_fp8_falls_back_to_bf16() -> None:
    gpu = get_gpu("A100")
    assert "fp8" not in gpu.dense_tflops
    # fp8 weights on Ampere are computed in bf16, not on the integer tensor cores.
    assert gpu.peak_flops("fp8") == gpu.peak_flops("bf16") == 312e12
    assert gpu.peak_flops("fp4") == gpu.peak_flops("bf16")


def test_hopper_fp4_runs_at_the_fp8_rate() -> None:
    gpu = get_gpu("H100")
    assert "fp4" not in gpu.dense_tflops
    assert gpu.peak_flops("fp4") == gpu.peak_flops("fp8")


def test_unknown_gpu_lists_the_catalog() -> None:
    with pytest.raises(InputError) as info:
        get_gpu("H300")
    assert info.value.field == "gpu"
    message = str(info.value)
    assert "unknown GPU 'H300'" in message
    for name in CATALOG:
        assert name in message


def test_gpu_aliases() -> None:
    assert get_gpu("h100-sxm").name == "H100"
    assert get_gpu("A100-80GB").name == "A100"


# ---------------------------------------------------------------- make_cluster


def test_make_cluster_fills_nodes_of_eight() -> None:
    cluster = make_cluster("H100", 16)
    assert (cluster.nodes, cluster.gpus_per_node, cluster.world_size) == (2, 8, 16)
    assert cluster.gpu.name == "H100"
    assert cluster.intra_node_bandwidth_gb_per_s == get_gpu("H100").intra_node_bandwidth_gb_per_s


def test_make_cluster_with_fewer_gpus_than_a_node() -> None:
    cluster = make_cluster("h100", 4)
    assert (cluster.nodes, cluster.gpus_per_node) == (1, 4)


def test_make_cluster_with_explicit_node_size() -> None:
    cluster = make_cluster("H100", 16, gpus_per_node=4)
    assert (cluster.nodes, cluster.gpus_per_node) == (4, 4)


@pytest.mark.parametrize(("gpus", "per_node"), [(12, 8), (0, None), (24, 16)])
def test_make_cluster_rejects_partial_nodes(gpus: int, per_node: int | None) -> None:
    with pytest.raises(InputError) as info:
        make_cluster("H100", gpus, per_node)
    assert info.value.field == "gpus"
    assert str(gpus) in str(info.value)


def test_scope_of_ranks() -> None:
    cluster = make_cluster("H100", 16)
    assert cluster.scope_of([3]) == "local"
    assert cluster.scope_of([0, 1, 2, 3, 4, 5, 6, 7]) == "intra_node"
    assert cluster.scope_of([8, 15]) == "intra_node"
    assert cluster.scope_of([7, 8]) == "inter_node"
    assert cluster.scope_of([0, 8]) == "inter_node"
    assert [cluster.node_of(rank) for rank in (0, 7, 8, 15)] == [0, 0, 1, 1]


# ---------------------------------------------------------------- cluster YAML


def test_bundled_cluster_files_exist() -> None:
    assert len(BUNDLED_CLUSTERS) >= 2


@pytest.mark.parametrize("path", BUNDLED_CLUSTERS, ids=lambda p: p.stem)
def test_bundled_cluster_files_load(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    cluster = load_cluster(path)
    assert cluster.gpu.name == raw["gpu"]
    assert cluster.world_size == raw["gpus_per_node"] * raw["nodes"]
    assert cluster.inter_node_bandwidth_gb_per_s == parse_gb_per_s(raw["inter_node_bandwidth_gb_per_s"])
    assert cluster.name == raw["name"]


def _custom_gpu() -> dict:
    return {
        "name": "X1", "full_name": "Example X1 64GB", "vendor": "other", "memory_gb": 64,
        "memory_bandwidth_gb_per_s": 2000, "dense_tflops": {"bf16": 500, "fp8": 1000},
        "intra_node_bandwidth_gb_per_s": 100, "intra_node_latency_us": 5.0, "source": "made up for the test",
    }


def test_cluster_yaml_with_custom_gpu(tmp_path: Path) -> None:
    path = tmp_path / "x1.yaml"
    path.write_text(yaml.safe_dump({"gpu": _custom_gpu(), "gpus_per_node": 4, "nodes": 2}))
    cluster = load_cluster(path)
    assert cluster.gpu.name == "X1"
    assert cluster.gpu.peak_flops("fp8") == 1000e12
    assert (cluster.gpus_per_node, cluster.nodes, cluster.world_size) == (4, 2, 8)
    # Link figures not given in the file come from the GPU.
    assert cluster.intra_node_bandwidth_gb_per_s == 100
    assert cluster.intra_node_latency_us == 5.0
    assert cluster.name == "x1"


def test_cluster_yaml_with_catalog_gpu_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "small.yaml"
    path.write_text("gpu: h200\nnodes: 3\n")
    cluster = load_cluster(path)
    assert cluster.gpu.name == "H200"
    assert (cluster.gpus_per_node, cluster.nodes) == (8, 3)


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ({"gpus_per_node": 8, "nodes": 2}, "cluster.gpu"),
        ({"gpu": "H100", "nodes": 2, "inter_node_bandwidth_gb_per_s": -50}, "cluster.inter_node_bandwidth_gb_per_s"),
        ({"gpu": "H100", "intra_node_bandwidth_gb_per_s": -1}, "cluster.intra_node_bandwidth_gb_per_s"),
        ({"gpu": {**_custom_gpu(), "memory_bandwidth_gb_per_s": -2000}}, "cluster.gpu.memory_bandwidth_gb_per_s"),
        ({"gpu": "H100", "nodes": 0}, "cluster.nodes"),
    ],
)
def test_cluster_yaml_errors_name_the_field(tmp_path: Path, content: dict, field: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(InputError) as info:
        load_cluster(path)
    assert info.value.field == field
    assert field.rsplit(".", 1)[-1] in str(info.value)


def test_cluster_yaml_with_unknown_gpu(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("gpu: H300\n")
    with pytest.raises(InputError, match="unknown GPU 'H300'"):
        load_cluster(path)


def test_unreadable_cluster_yaml(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("gpu: [H100\n")
    with pytest.raises(InputError) as info:
        load_cluster(path)
    assert info.value.field == "cluster"
    with pytest.raises(InputError):
        load_cluster(tmp_path / "absent.yaml")
