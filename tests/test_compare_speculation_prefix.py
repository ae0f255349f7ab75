"""The speculation and prefix-caching comparison's pure parts: its requests, both tools' options for them, the
stored AIConfigurator figures, the public MTP rows it prices or leaves out, and its tables' arithmetic.

No AIConfigurator install and no shardplan run are needed: the checks read the request set, the stored file and
``end_to_end.yaml``, and build the command lines both tools would be given.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import compare_speculation_prefix as cmp  # noqa: E402
import feature_requests as fr  # noqa: E402
import speculation_rows as spec_rows  # noqa: E402


def _option(options: list[str], name: str) -> str:
    return options[options.index(name) + 1]


def _config(model: str) -> dict:  # type: ignore[type-arg]
    path = Path(model) if model.endswith(".json") else ROOT / "tools" / "data" / "models" / (
        model.replace("/", "__") + ".json")
    return json.loads(path.read_text())


def test_the_request_set_covers_both_features_on_dense_and_moe_models() -> None:
    for feature in ("spec", "prefix"):
        chosen = [r for r in fr.FEATURE_REQUESTS if r.feature == feature]
        assert {r.moe for r in chosen} == {True, False}, feature
        assert {r.batching for r in chosen} == {"static", "continuous"}, feature
    assert len(fr.FEATURE_REQUESTS) >= 6
    assert len({r.label for r in fr.FEATURE_REQUESTS}) == len(fr.FEATURE_REQUESTS)


def test_speculation_is_asked_only_of_models_that_ship_mtp_layers() -> None:
    for request in fr.FEATURE_REQUESTS:
        if request.feature == "spec":
            assert _config(request.model).get("num_nextn_predict_layers", 0) > 0, request.label


@pytest.mark.parametrize("request_", fr.FEATURE_REQUESTS, ids=lambda r: r.label)
def test_both_tools_are_asked_the_same_feature(request_: fr.FeatureRequest) -> None:
    aic, own = fr.aic_feature_options(request_), fr.shardplan_feature_options(request_)
    if request_.feature == "prefix":
        assert int(_option(aic, "--prefix")) / request_.isl == pytest.approx(float(_option(own, "--prefix-hit")))
    else:
        assert _option(own, "--spec") == f"mtp:{_option(aic, '--nextn')}"
        assert float(_option(own, "--spec-accept")) == float(_option(aic, "--nextn-accepted"))
        assert 0 <= request_.accepted <= request_.draft_tokens


@pytest.mark.parametrize("request_", fr.FEATURE_REQUESTS, ids=lambda r: r.label)
def test_both_tools_price_the_same_deployment(request_: fr.FeatureRequest) -> None:
    off, on = cmp.aic_commands(request_)
    assert on == [*off, *fr.aic_feature_options(request_)]
    assert _option(off, "--estimate-mode") == ("static" if request_.batching == "static" else "agg")
    assert int(_option(off, "--batch-size")) == request_.batch  # one worker, no attention DP: the whole batch
    assert int(_option(off, "--tp")) == request_.worker.tp
    own = fr.shardplan_options(request_)
    assert _option(own, "--batch") == str(request_.batch) and _option(own, "--batching") == request_.batching
    assert f"tp={request_.worker.tp}" in _option(own, "-s")
    assert _option(own, "--engine") == _option(off, "--backend")


def test_a_prefix_share_that_is_not_whole_tokens_is_refused() -> None:
    request = fr.FeatureRequest("x", fr.LLAMA_8B, fr.AIC_LLAMA_8B, False, "H100", fr.TP1, 1, 1000, 10, "prefix",
                                prefix_hit=0.3333)
    with pytest.raises(ValueError, match="not whole"):
        fr.prefix_tokens(request)


def test_stored_aiconfigurator_figures_come_from_the_calls_the_script_makes() -> None:
    stored = json.loads(cmp.STORED.read_text())
    assert stored["aiconfigurator"] == cmp.AIC_VERSION
    for request in fr.FEATURE_REQUESTS:
        off, on = cmp._stored_figures(stored["requests"], request)
        assert off.ttft_ms > 0 and off.tpot_ms > 0 and on.ttft_ms > 0 and on.tpot_ms > 0
        if request.batching == "continuous":
            continue
        if request.feature == "spec":  # a static batch's prefill does not see the drafts
            assert on.ttft_ms == off.ttft_ms and on.tpot_ms < off.tpot_ms
        else:  # nor its decode the cache
            assert on.tpot_ms == off.tpot_ms and on.ttft_ms < off.ttft_ms


def test_stored_figures_of_another_call_are_refused() -> None:
    request = fr.FEATURE_REQUESTS[0]
    off, on = cmp.aic_commands(request)
    entry = {"off": {"command": shlex.join(off), "ttft_ms": 1.0, "tpot_ms": 1.0},
             "on": {"command": shlex.join([*off, "--nextn", "9"]), "ttft_ms": 1.0, "tpot_ms": 1.0}}
    with pytest.raises(cmp.AicError, match="another call"):
        cmp._stored_figures({request.label: entry}, request)
    with pytest.raises(cmp.AicError, match="no stored"):
        cmp._stored_figures({}, request)


def test_every_public_speculative_row_is_priced_with_its_stated_acceptance_or_left_out() -> None:
    rows = yaml.safe_load((ROOT / "benchmarks" / "calibration" / "end_to_end.yaml").read_text())
    found = spec_rows.public_rows(rows)
    assert {p.id for p in found} == {row["id"] for row in rows if spec_rows.speculative(row)}
    for public in found:
        if public.reason is None:
            assert public.accepted == public.row["spec_accepted"] and public.draft_tokens is not None
        elif public.row.get("spec_accepted") is None and public.row["gpu"] != "H800":
            assert "no acceptance" in public.reason
    assert sum(1 for p in found if p.reason is None) >= 3


def test_public_rows_left_out_say_why() -> None:
    base = {"id": "r", "model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "gpus": 8, "strategy": "tp=8",
            "weight_dtype": "fp8", "isl": 1024, "osl": 2048, "batch": 1, "metric": "output_tokens_per_s",
            "value": 200.0, "engine": "TensorRT-LLM", "source": "s", "note": "MTP", "spec": "mtp:3"}
    priced, = spec_rows.public_rows([{**base, "spec_accepted": 1.8}])
    assert priced.reason is None and spec_rows.measured_tpot_ms(priced.row) == pytest.approx(5.0)
    reasons = [p.reason for p in spec_rows.public_rows([
        {**base, "spec_accepted": 1.8, "gpu": "H800"}, base, {**base, "spec": None, "spec_accepted": 1.0},
        {**base, "spec_accepted": 1.0, "batch": 64},
        {**base, "spec_accepted": 1.0, "strategy": "adp=8", "metric": "tpot_ms", "value": 25.0},
    ])]
    assert reasons[0] is not None and "H800" in reasons[0]
    assert reasons[1] is not None and "no acceptance" in reasons[1]
    assert reasons[2] is not None and "draft length" in reasons[2]
    assert reasons[3] is not None and "not a per-token latency" in reasons[3]
    assert reasons[4] is not None and "at least 8 sequences" in reasons[4]


def test_the_measured_speed_up_reads_the_rows_metric_the_right_way_round() -> None:
    base = {"id": "r", "model": "deepseek-ai/DeepSeek-V3", "gpu": "H200", "gpus": 8, "strategy": "tp=8",
            "weight_dtype": "fp8", "isl": 1024, "osl": 2048, "batch": 1, "engine": "SGLang", "source": "s",
            "spec": "mtp:2", "spec_accepted": 1.2}
    speed, = spec_rows.public_rows([{**base, "metric": "output_tokens_per_s", "value": 150.0, "no_spec_value": 100}])
    latency, = spec_rows.public_rows([{**base, "metric": "tpot_ms", "value": 20.0, "no_spec_value": 30.0}])
    assert cmp.PublicResult(speed).speedups[0] == pytest.approx(1.5)  # tokens/s: faster with MTP
    assert cmp.PublicResult(latency).speedups[0] == pytest.approx(1.5)  # TPOT: shorter with MTP


def test_a_public_row_is_asked_with_its_engine_and_formats_and_its_speculation_only_when_on() -> None:
    rows = yaml.safe_load((ROOT / "benchmarks" / "calibration" / "end_to_end.yaml").read_text())
    public = next(p for p in spec_rows.public_rows(rows) if p.reason is None)
    off, on = spec_rows.row_options(public, False), spec_rows.row_options(public, True)
    assert "--spec" not in off and on[: len(off)] == off
    assert _option(on, "--spec") == f"mtp:{public.draft_tokens}"
    assert _option(off, "--engine") == "trtllm" and _option(off, "--weight-dtype") == public.row["weight_dtype"]
    assert _option(off, "--batching") == "static" and _option(off, "-s") == public.row["strategy"]


def test_errors_effects_and_medians() -> None:
    request = next(r for r in fr.FEATURE_REQUESTS if r.feature == "spec")
    row = cmp.FeatureRow(request, aic_off=cmp.Figures(100, 10), aic_on=cmp.Figures(100, 6),
                         own_off=cmp.Figures(110, 10), own_on=cmp.Figures(110, 6.6))
    cells = cmp.feature_cells(row)
    assert cells["on: TTFT err"] == "+10.0%" and cells["on: TPOT err"] == "+10.0%"
    assert cells["effect on TTFT, TPOT: AIC / shardplan"] == "1.00 / 1.00; 0.60 / 0.66"
    other = cmp.FeatureRow(request, aic_off=cmp.Figures(100, 10), aic_on=cmp.Figures(100, 5),
                           own_off=cmp.Figures(70, 10), own_on=cmp.Figures(70, 5))
    missing = cmp.FeatureRow(request)  # a request neither tool priced counts in no median
    summary, = cmp.feature_summary([row, other, missing])
    assert "3 requests" in summary
    assert "TTFT 20.0% (off 20.0%, effect 0.0%)" in summary and "TPOT 5.0% (off 0.0%, effect 5.0%)" in summary
    continuous = next(r for r in fr.FEATURE_REQUESTS if r.feature == "spec" and r.batching == "continuous")
    queued = cmp.FeatureRow(continuous, aic_off=cmp.Figures(100, 10), aic_on=cmp.Figures(100, 5),
                            own_off=cmp.Figures(50, 10), own_on=cmp.Figures(50, 5))
    overall, static = cmp.feature_summary([row, queued])
    assert "TTFT 30.0%" in overall and static.strip().startswith("the 1 static batches: TTFT 10.0%")


def test_a_decode_side_row_prefills_one_prompt_per_attention_group() -> None:
    """A row measured on the decode GPUs of a split deployment never prefilled there: 48 sequences a rank of 4k
    prompts prefilled at once would not fit the 96 GB H20s the decode step ran on."""
    base = {"id": "r", "model": "deepseek-ai/DeepSeek-V3", "gpu": "H20", "gpus": 16, "strategy": "adp=16,ep=16",
            "weight_dtype": "fp8", "isl": 4096, "osl": 1536, "batch": 768, "metric": "tpot_ms", "value": 67.2,
            "engine": "SGLang", "source": "s", "note": "MTP", "spec": "mtp:1", "spec_accepted": 0.85}
    split, = spec_rows.public_rows([{**base, "decode_only": True}])
    whole, = spec_rows.public_rows([base])
    assert _option(spec_rows.row_options(split, True), "--prefill-batch") == "16"
    assert "--prefill-batch" not in spec_rows.row_options(whole, True)


def test_the_public_summary_sets_the_roofline_s_rows_apart() -> None:
    base = {"id": "r", "model": "deepseek-ai/DeepSeek-V3", "gpus": 8, "strategy": "tp=8", "weight_dtype": "fp8",
            "isl": 1024, "osl": 1024, "batch": 1, "metric": "tpot_ms", "engine": "SGLang", "source": "s",
            "spec": "mtp:1", "spec_accepted": 0.8}
    on_tables, on_roofline = spec_rows.public_rows([{**base, "gpu": "H200", "value": 10.0},
                                                    {**base, "gpu": "MI300X", "value": 10.0}])
    results = [cmp.PublicResult(on_tables, 10.0, own_on=cmp.Figures(1.0, 11.0)),
               cmp.PublicResult(on_roofline, 10.0, own_on=cmp.Figures(1.0, 5.0))]
    overall, tables, roofline = cmp.public_summary(results).splitlines()
    assert "2 priced: median |TPOT error| 30.0%" in overall
    assert "measured kernel tables, 1 priced: median |TPOT error| 10.0%" in tables
    assert "roofline prices (MI300X), 1 priced: median |TPOT error| 50.0%" in roofline
