"""AIConfigurator's DeepSeek-on-vLLM estimate less the two all-reduces a layer it counts twice
(benchmarks/aic_double_count.py), and how the speculation / prefix comparison reads and stores its breakdowns.

The breakdowns below are excerpts of ``aiconfigurator cli estimate --detail time`` (0.12.0) for DeepSeek-V3 on
8 x H200 under vLLM, TP=8 / EP=8, 1024/1024 tokens: a static batch of 16 and continuous batching of 32. No
AIConfigurator install is needed.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import aic_double_count as dc  # noqa: E402
import compare_speculation_prefix as cmp  # noqa: E402
import feature_requests as fr  # noqa: E402

LOG = ("04:40:07 [aiconfigurator] [I] [utils.py:1318] Loaded model config for deepseek-ai/DeepSeek-V3: "
       "architecture=DeepseekV3ForCausalLM, layers=61, n=128\n")

STATIC = LOG + """
Latency Summary
  metric                 latency            SOL     SOL%
  ttft                866.678 ms     306.247 ms    35.3%

Context phase (total = 866.678 ms, SOL = 306.247 ms, SOL% = 35.3%)
  op                                 latency            SOL     SOL%  share (%)             source
  context_mla_block               142.862 ms       5.298 ms     3.7%  ██░░░░░░░░░░   16.5%  [silicon]
  context_moe_pre_dispatch         56.723 ms      55.719 ms    98.2%  █░░░░░░░░░░░    6.5%  [silicon]
  context_moe                     429.280 ms      44.504 ms    10.4%  ██████░░░░░░   49.5%  [silicon]
  context_moe_post_dispatch        56.723 ms      55.719 ms    98.2%  █░░░░░░░░░░░    6.5%  [silicon]
  ... (others, 1 items)           113.445 ms     111.438 ms    98.2%  ██░░░░░░░░░░   13.1%

Generation phase (total = 24876.918 ms, SOL = 9732.784 ms, SOL% = 39.1%)
  op                             latency            SOL     SOL%  share (%)             source
  generation_mla_block       8438.304 ms     220.825 ms     2.6%  ████░░░░░░░░   33.9%  [silicon]
  generation_moe_overlap    14784.519 ms    9327.191 ms    63.1%  ███████░░░░░   59.4%  [mixed]
  generation_tp_allreduce    1189.451 ms     111.329 ms     9.4%  █░░░░░░░░░░░    4.8%  [silicon]

Data Source Breakdown (per-op)
    context_mla_block              silicon
"""

AGG = LOG + """
Scheduling: 32 mix steps + 992 gen-only steps

Mix Step (total = 88.916 ms, SOL = 35.104 ms, SOL% = 39.5%)
  op                                 latency            SOL     SOL%  share (%)             source
  context_moe_pre_dispatch          4.851 ms       3.588 ms    74.0%  █░░░░░░░░░░░    5.5%  [silicon]
  context_moe                      40.312 ms      18.184 ms    45.1%  █████░░░░░░░   45.3%  [silicon]
  context_moe_post_dispatch         4.851 ms       3.588 ms    74.0%  █░░░░░░░░░░░    5.5%  [silicon]

Gen-Only Step (total = 26.360 ms, SOL = 18.910 ms, SOL% = 71.7%)
  op                             latency            SOL     SOL%  share (%)             source
  generation_moe_overlap       16.543 ms      18.188 ms   109.9%  ████████░░░░   62.8%  [mixed]
  generation_tp_allreduce       1.327 ms       0.218 ms    16.4%  █░░░░░░░░░░░    5.0%  [silicon]
"""


def test_the_breakdown_is_read_section_by_section_without_the_others_line() -> None:
    found = dc.parse_breakdown(STATIC)
    assert found.architecture == "DeepseekV3ForCausalLM"
    assert found.totals == {"Context phase": 866.678, "Generation phase": 24876.918}
    assert set(found.ops["Context phase"]) == {"context_mla_block", "context_moe_pre_dispatch", "context_moe",
                                               "context_moe_post_dispatch"}
    assert found.ops["Generation phase"]["generation_tp_allreduce"] == 1189.451
    agg = dc.parse_breakdown(AGG)
    assert (agg.mix_steps, agg.genonly_steps) == (32, 992)
    assert agg.ops["Mix Step"]["context_moe_post_dispatch"] == 4.851


def test_a_static_estimate_loses_the_dispatch_all_reduces_and_the_decode_ones() -> None:
    ttft, tpot = dc.without_double_count(dc.parse_breakdown(STATIC), 866.678, 24.318, batch=16)
    # The prefill's two dispatch all-reduces (as much as the model's own two, the "others" line) come out.
    assert ttft == pytest.approx(866.678 - 2 * 56.723)
    # The decode's two extra all-reduces a layer are as much as its own generation_tp_allreduce line.
    assert tpot == pytest.approx(24.318 * (1 - 1189.451 / 24876.918))


def test_an_agg_estimate_loses_them_under_its_queuing_factor_and_in_each_step() -> None:
    ttft, tpot = dc.without_double_count(dc.parse_breakdown(AGG), 223.788, 28.315, batch=32)
    assert ttft == pytest.approx(223.788 - (1 + 5 / 8) * 2 * 4.851)  # VllmBackend: 1 + log2(32) / 8
    removed = 32 * 2 * 4.851 + 992 * 1.327
    assert tpot == pytest.approx(28.315 * (1 - removed / (32 * 88.916 + 992 * 26.360)))
    assert dc.without_double_count(dc.parse_breakdown(AGG), 100.0, 20.0, batch=1)[0] == pytest.approx(100 - 9.702)


def test_only_deepseek_on_vllm_with_tensor_parallel_attention_counts_twice() -> None:
    found = dc.parse_breakdown(STATIC)
    assert dc.counts_allreduces_twice(found, "vllm", tp=8, attention_dp=1)
    assert not dc.counts_allreduces_twice(found, "vllm", tp=1, attention_dp=1)
    assert not dc.counts_allreduces_twice(found, "vllm", tp=8, attention_dp=8)
    assert not dc.counts_allreduces_twice(found, "sglang", tp=8, attention_dp=1)
    other = dc.parse_breakdown(STATIC.replace("DeepseekV3ForCausalLM", "Qwen3MoeForCausalLM"))
    assert not dc.counts_allreduces_twice(other, "vllm", tp=8, attention_dp=1)


def _request(label: str) -> fr.FeatureRequest:
    return next(r for r in fr.FEATURE_REQUESTS if r.label == label)


def test_a_row_without_a_breakdown_keeps_the_figures_and_one_with_it_loses_the_double_count() -> None:
    row = cmp.FeatureRow(_request("dsv3-8xH200-b16-mtp1"), aic_off=cmp.Figures(866.678, 24.318),
                         aic_on=cmp.Figures(866.678, 13.95))
    assert row.aic_single("off") is row.aic_off
    row.aic_detail["off"] = dc.parse_breakdown(STATIC)
    assert row.aic_single("off") == cmp.Figures(*dc.without_double_count(row.aic_detail["off"], 866.678, 24.318, 16))
    assert row.aic_single("on") is row.aic_on


def test_breakdowns_are_asked_only_of_deepseek_requests_with_the_same_call_plus_detail() -> None:
    for request in fr.FEATURE_REQUESTS:
        details = cmp.detail_commands(request)
        if not request.aic_model.startswith("deepseek-ai/"):
            assert details == ()
            continue
        for plain, detail in zip(cmp.aic_commands(request), details, strict=True):
            assert detail == [*plain, "--detail", "time"]


def test_stored_breakdowns_come_from_the_calls_and_price_what_the_stored_figures_say() -> None:
    stored = json.loads(cmp.STORED.read_text())["requests"]
    deepseek = [r for r in fr.FEATURE_REQUESTS if cmp.detail_commands(r) and r.label in stored]
    assert deepseek
    for request in deepseek:
        found = cmp._stored_detail(stored, request)
        assert set(found) == {"off", "on"}, request.label
        for key, breakdown in found.items():
            figures = stored[request.label][key]
            if request.batching == "static":  # a static TTFT is the prefill's op sum
                assert breakdown.totals["Context phase"] == pytest.approx(figures["ttft_ms"], abs=1e-3)
            # its vLLM path keeps the dispatch ops' proxy all-reduces beside its own; its TensorRT-LLM path does not
            twice = dc.counts_allreduces_twice(breakdown, request.engine, request.worker.tp, request.worker.dp)
            assert twice == (request.engine == "vllm"), request.label
            if request.engine == "trtllm":  # two all-reduces a layer, the dispatch ops' own: no tp_allreduce op
                assert not any("tp_allreduce" in op for ops in breakdown.ops.values() for op in ops), request.label


def test_a_stored_breakdown_of_another_call_is_refused() -> None:
    request = _request("dsv3-8xH200-b16-mtp1")
    command = shlex.join([*cmp.aic_commands(request)[0], "--detail", "time", "--tp", "4"])
    stored = {request.label: {"off": {"detail": {"command": command}}}}
    with pytest.raises(cmp.AicError, match="another call"):
        cmp._stored_detail(stored, request)
