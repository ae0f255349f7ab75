"""Bandwidths in hardware files: GB/s under the *_gb_per_s names, unit strings, and the old *_gbps names."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml
from cli_helpers import run_here

from shardplan.contracts.hardware import GPU, Cluster
from shardplan.contracts.units import RENAMED_BANDWIDTH_FIELDS, parse_gb_per_s
from shardplan.errors import DeprecatedFieldWarning, InputError
from shardplan.tools.catalogs.gpus import get_gpu, load_cluster


@pytest.mark.parametrize(
    ("text", "gb_per_s"),
    [
        ("400Gbps", 50.0),  # a NIC's rating, in gigabits
        ("400 Gb/s", 50.0),
        ("200 Gbit/s", 25.0),
        ("50GB/s", 50.0),  # gigabytes
        ("50 GBps", 50.0),
        ("450 GByte/s", 450.0),
        ("3.35 TB/s", 3350.0),
        ("1.6Tbps", 200.0),
        ("800 Mb/s", 0.1),
        ("50", 50.0),  # a bare number is GB/s, as under the field's name
        (" 12.5 ", 12.5),
    ],
)
def test_unit_strings_convert_to_gigabytes_per_second(text: str, gb_per_s: float) -> None:
    assert parse_gb_per_s(text) == pytest.approx(gb_per_s)


def test_bits_and_bytes_differ_by_eight() -> None:
    for number in (25, 100, 400, 3.2):
        assert parse_gb_per_s(f"{number}Gbps") * 8 == pytest.approx(parse_gb_per_s(f"{number}GBps"))
        assert parse_gb_per_s(f"{number} Gb/s") == pytest.approx(number / 8)


def test_numbers_pass_through_unchanged() -> None:
    assert parse_gb_per_s(50) == 50 and parse_gb_per_s(3.5) == 3.5


def _write(tmp_path: Path, content: dict, name: str = "cluster.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(content))
    return path


def test_a_nic_rating_in_gigabits_gives_the_same_cluster_as_gigabytes(tmp_path: Path) -> None:
    in_bits = load_cluster(_write(tmp_path, {"name": "c", "gpu": "H100", "nodes": 2,
                                             "inter_node_bandwidth_gb_per_s": "400Gbps",
                                             "intra_node_bandwidth_gb_per_s": "3600 Gb/s"}))
    in_bytes = load_cluster(_write(tmp_path, {"name": "c", "gpu": "H100", "nodes": 2,
                                              "inter_node_bandwidth_gb_per_s": 50,
                                              "intra_node_bandwidth_gb_per_s": "450GB/s"}))
    assert in_bits == in_bytes
    assert (in_bits.inter_node_bandwidth_gb_per_s, in_bits.intra_node_bandwidth_gb_per_s) == (50.0, 450.0)


def test_a_gpu_mapping_takes_unit_strings_too() -> None:
    fields = get_gpu("H100").model_dump() | {"memory_bandwidth_gb_per_s": "3.35 TB/s"}
    assert GPU.model_validate(fields).memory_bandwidth_gb_per_s == pytest.approx(3350.0)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("fast", "is not a bandwidth"),
        ("400 Gbpss", "is not a bandwidth"),
        ("50 GiB/s", "is not a bandwidth"),
        ("-50GB/s", "is not a bandwidth"),
        ("0 GB/s", "greater than 0"),
        ("inf", "finite"),
    ],
)
def test_bad_bandwidth_strings_are_refused_naming_the_field(tmp_path: Path, value: str, said: str) -> None:
    path = _write(tmp_path, {"gpu": "H100", "nodes": 2, "inter_node_bandwidth_gb_per_s": value})
    with pytest.raises(InputError) as info:
        load_cluster(path)
    assert info.value.field == "cluster.inter_node_bandwidth_gb_per_s"
    assert said in str(info.value)
    if said == "is not a bandwidth":
        assert "400Gbps" in str(info.value) and "50GB/s" in str(info.value)  # the accepted forms


def _old_names(fields: dict) -> dict:
    old_of = {new: old for old, new in RENAMED_BANDWIDTH_FIELDS.items()}
    return {old_of.get(key, key): value for key, value in fields.items()}


def test_old_field_names_read_as_gb_per_s_with_a_deprecation_warning(tmp_path: Path) -> None:
    gpu = get_gpu("H100").model_dump() | {"name": "X", "inter_node_bandwidth_gb_per_s": 25.0}
    new = {"name": "c", "gpu": gpu, "gpus_per_node": 8, "nodes": 2,
           "intra_node_bandwidth_gb_per_s": 300, "inter_node_bandwidth_gb_per_s": 25}
    old = new | {"gpu": _old_names(gpu)}
    old = _old_names(old)
    assert not any(key.endswith("_gb_per_s") for key in [*old, *old["gpu"]])
    with pytest.warns(DeprecatedFieldWarning) as caught:
        from_old = load_cluster(_write(tmp_path, old, "old.yaml"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names warn about nothing
        from_new = load_cluster(_write(tmp_path, new, "old.yaml"))
    assert from_old == from_new
    texts = [str(w.message) for w in caught]
    assert len(texts) == 2  # one for the cluster's fields, one for its GPU's
    for old_name, new_name in RENAMED_BANDWIDTH_FIELDS.items():
        assert any(f"{old_name} -> " in t and new_name in t and "GB/s" in t for t in texts), (old_name, texts)
    assert all(issubclass(w.category, DeprecationWarning) for w in caught)


def test_a_cluster_contract_reads_old_names_directly() -> None:
    gpu = get_gpu("H100")
    with pytest.warns(DeprecatedFieldWarning) as caught:
        cluster = Cluster.model_validate({"gpu": gpu, "gpus_per_node": 8, "nodes": 2, "intra_node_latency_us": 3,
                                          "inter_node_latency_us": 8, "intra_node_bandwidth_gbps": 450,
                                          "inter_node_bandwidth_gbps": 50})
    assert (cluster.intra_node_bandwidth_gb_per_s, cluster.inter_node_bandwidth_gb_per_s) == (450, 50)
    [warning] = caught
    assert "cluster.intra_node_bandwidth_gbps -> cluster.intra_node_bandwidth_gb_per_s" in str(warning.message)
    assert "cluster.inter_node_bandwidth_gbps -> cluster.inter_node_bandwidth_gb_per_s" in str(warning.message)
    assert "inter_node_bandwidth_gbps" not in cluster.model_dump_json()


def test_old_and_new_name_together_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, {"gpu": "H100", "nodes": 2, "inter_node_bandwidth_gbps": 50,
                             "inter_node_bandwidth_gb_per_s": 50})
    with pytest.raises(InputError, match="keep only inter_node_bandwidth_gb_per_s"):
        load_cluster(path)


_COST = ("cost", "--model", "meta-llama/Llama-3.1-8B", "--strategy", "tp=8,pp=2", "--isl", "512", "--osl", "16",
         "--batch", "8", "--json")


def test_cli_reads_old_names_with_one_warning_line_and_the_same_figures(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _write(tmp_path, {"gpu": "H100", "nodes": 2, "inter_node_bandwidth_gbps": 25}, "old.yaml")
    new = _write(tmp_path, {"gpu": "H100", "nodes": 2, "inter_node_bandwidth_gb_per_s": "200Gbps"}, "new.yaml")
    from_old = run_here(capsys, *_COST, "--cluster", str(old))
    from_new = run_here(capsys, *_COST, "--cluster", str(new))
    assert from_old.returncode == 0 and from_new.returncode == 0, from_old.stderr + from_new.stderr
    warning_lines = [line for line in from_old.stderr.splitlines() if line.startswith("warning:")]
    assert len(warning_lines) == 1, from_old.stderr
    assert "inter_node_bandwidth_gbps" in warning_lines[0] and "inter_node_bandwidth_gb_per_s" in warning_lines[0]
    assert "warning:" not in from_new.stderr
    figures = ("ttft_ms", "tpot_ms", "tokens_per_s")
    old_cost, new_cost = json.loads(from_old.stdout), json.loads(from_new.stdout)
    assert [old_cost["figures"][k] for k in figures] == [new_cost["figures"][k] for k in figures]


def test_cli_refuses_a_bad_bandwidth_string_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path, {"gpu": "H100", "nodes": 2, "inter_node_bandwidth_gb_per_s": "400 Gbit"})
    result = run_here(capsys, *_COST, "--cluster", str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "cluster.inter_node_bandwidth_gb_per_s" in result.stderr and "400Gbps" in result.stderr


def test_docstring_examples_run() -> None:
    import doctest

    from shardplan.contracts import units

    assert doctest.testmod(units).failed == 0


def test_a_dag_written_with_the_old_names_still_validates(tmp_path: Path) -> None:
    from shardplan.contracts.strategy import parse_strategy
    from shardplan.contracts.workload import Workload
    from shardplan.tools.builder.build import build_dag
    from shardplan.tools.catalogs.gpus import make_cluster
    from shardplan.tools.catalogs.models import load_model
    from shardplan.validators.schema_check import validate_json

    dag = build_dag(load_model("llama-3.1-8b"), make_cluster("H100", 2), parse_strategy("tp=2"),
                    Workload(isl=64, osl=4, batch=1))
    text = dag.model_dump_json()
    old_text = text
    for old_name, new_name in RENAMED_BANDWIDTH_FIELDS.items():
        old_text = old_text.replace(f'"{new_name}"', f'"{old_name}"')
    assert old_text != text
    with pytest.warns(DeprecatedFieldWarning):
        report = validate_json(old_text)
    assert report.valid, [v.message for v in report.violations[:3]]
    assert report.nodes == len(dag.nodes)
