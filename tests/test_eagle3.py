"""``--spec eagle:K`` priced as the EAGLE-3 head the exported commands load: its fc over three target hidden states on
the first pass only, its QKV projection over embedding and hidden state, its own LM head over the draft vocabulary
(from the head's config), its memory, and the export naming the head the plan priced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mutation_cases import trimmed_model
from pydantic import ValidationError

from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.speculation import Speculation, parse_speculation, speculation_text
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InputError
from shardplan.tools.builder.build import build_dag, build_phase_sample
from shardplan.tools.catalogs.drafters import drafter_for
from shardplan.tools.catalogs.eagle_heads import bundled_heads
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.memory import drafter_bytes_per_gpu
from shardplan.tools.launch.commands import launch_command
from shardplan.tools.planning.planner import plan_for_strategy, resolve_request
from shardplan.tools.serving.drafting import DraftPricer
from shardplan.tools.serving.steps import StepPricer

LLAMA_8B = load_model("meta-llama/Llama-3.1-8B")
LLAMA_70B = load_model("meta-llama/Llama-3.1-70B")
H100_1, H100_2 = make_cluster("H100", 1), make_cluster("H100", 2)
HEAD_8B = bundled_heads()["meta-llama/Llama-3.1-8B"]["config"]


def _head_dir(tmp_path: Path, **changes: object) -> str:
    """A folder holding an EAGLE-3 head config.json: the bundled 8B head's, with ``changes`` (None drops a key)."""
    config = {**HEAD_8B, **changes}
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return str(tmp_path)


def test_eagle_names_a_head_and_only_eagle_does() -> None:
    spec = parse_speculation("eagle:/heads/llama8b:3", 2.0)
    assert (spec.method, spec.head, spec.draft_tokens, spec.draft_model) == ("eagle", "/heads/llama8b", 3, None)
    assert speculation_text(spec) == "eagle:/heads/llama8b:3"
    assert parse_speculation("eagle:3", 2.0).head is None
    with pytest.raises(ValidationError):
        Speculation(method="mtp", draft_tokens=1, accepted=0.5, head="/heads/llama8b")
    with pytest.raises(InputError) as caught:
        parse_speculation("eagle::3", 2.0)
    assert caught.value.field == "spec"


def test_the_draft_pass_runs_the_heads_shapes_not_the_targets() -> None:
    """In the DAG: fc (3 h wide) in the first pass only; QKV over 2 h in every pass; the draft LM head has the head's
    32,000 rows (split over TP) where the target's has 128,256."""
    work = Workload(isl=64, osl=8, batch=8, speculation=parse_speculation("eagle:3", 1.0))
    dag = build_dag(trimmed_model("llama-3.1-8b", 2), H100_2, parse_strategy("tp=2"), work)
    h = LLAMA_8B.hidden_size
    decode = [n for n in dag.nodes if n.phase == "decode"]
    fuse = {n.draft_pass for n in decode if n.name == "fuse_proj"}
    assert fuse == {0}
    assert {n.shape["k"] for n in decode if n.name == "fuse_proj"} == {3 * h}
    qkv = {n.draft_pass: n.shape["k"] for n in decode if n.name == "qkv_proj"}
    assert qkv == {None: h, 0: 2 * h, 1: 2 * h, 2: 2 * h}
    heads = {n.draft_pass: n.shape["n"] for n in decode if n.name == "lm_head"}
    assert heads == {None: LLAMA_8B.vocab_size // 2, 0: 32000 // 2, 1: 32000 // 2, 2: 32000 // 2}


def test_the_serving_sample_of_the_head_reads_embedding_and_hidden() -> None:
    drafter = drafter_for(LLAMA_8B, parse_speculation("eagle:2", 1.0))
    work = Workload(isl=1, osl=1, batch=4)
    graph, _, _ = build_phase_sample(drafter.network, H100_1, "decode", PhaseStrategy(), work, drafter.qkv_input)
    assert {n.shape["k"] for n in graph.nodes if n.name == "qkv_proj"} == {2 * drafter.network.hidden_size}


class _Curves:
    """Draft network prices where only the fusing projection costs: 1 s per call."""

    def linear_s(self, tokens: float) -> float:
        return 0.0

    def decode_attention_s(self, sequences: float) -> float:
        return 0.0

    def verify_attention_s(self, sequences: float) -> float:
        return 0.0

    def prefill_attention_s(self, tokens: float) -> float:
        return 0.0

    def fuse_s(self, tokens: float) -> float:
        return 1.0

    def prefill_s(self, prompts: int) -> float:
        return 0.0


def test_eagle3_fuses_once_a_step_and_mtp_every_pass() -> None:
    eagle = DraftPricer(drafter_for(LLAMA_8B, parse_speculation("eagle:3", 1.0)), _Curves())
    mtp = DraftPricer(drafter_for(load_model("deepseek-v3"), parse_speculation("mtp:3", 1.0)), _Curves())
    assert eagle.draft_s(8) == 1.0
    assert mtp.draft_s(8) == 3.0


def test_a_reduced_draft_vocabulary_makes_drafting_cheaper(tmp_path: Path) -> None:
    """The same head without draft_vocab_size drafts over the full vocabulary, as the engines then do: dearer."""
    def drafting_s(spec: str) -> float:
        speculation = parse_speculation(spec, 2.0)
        pricer = StepPricer(LLAMA_8B, H100_1, PhaseStrategy(), 2048, 256, backend="roofline", speculation=speculation)
        assert pricer.draft is not None
        return pricer.draft.draft_s(32)

    full = _head_dir(tmp_path, draft_vocab_size=None)
    assert drafter_for(LLAMA_8B, parse_speculation(f"eagle:{full}:3", 2.0)).network.vocab_size == 128256
    reduced, whole = drafting_s("eagle:3"), drafting_s(f"eagle:{full}:3")
    # Three passes each skip reading (128,256 - 32,000) x 4,096 fp16 weights: 2.5 GB in all, ~0.8 ms on an H100.
    assert whole - reduced > 0.5e-3


def test_the_heads_memory_counts_its_own_lm_head_fc_and_wide_qkv() -> None:
    """The bundled 8B head on one GPU, counted from its config: the parameters of the public checkpoint."""
    work = Workload(isl=2048, osl=512, batch=1, speculation=parse_speculation("eagle:3", 2.0))
    weights, kv = drafter_bytes_per_gpu(LLAMA_8B, PhaseStrategy(), work, 2560)
    h, inter, vocab = HEAD_8B["hidden_size"], HEAD_8B["intermediate_size"], HEAD_8B["draft_vocab_size"]
    q, kv_width = HEAD_8B["num_attention_heads"] * 128, 2 * HEAD_8B["num_key_value_heads"] * 128
    params = 2 * h * (q + kv_width) + q * h + 3 * h * inter + 3 * h * h + vocab * h
    assert weights == pytest.approx(params * DTYPE_BYTES["fp16"] + vocab * 8, rel=1e-3)
    assert kv == pytest.approx(2560 * kv_width * DTYPE_BYTES[LLAMA_8B.kv_dtype])
    # On two GPUs the LM head and Q split, fc (replicated) does not.
    split, _ = drafter_bytes_per_gpu(LLAMA_8B, PhaseStrategy(tp=2), work, 2560)
    assert weights / 2 < split < weights


def test_a_head_for_another_model_is_refused_naming_spec(tmp_path: Path) -> None:
    for changes in ({"vocab_size": 32000}, {"hidden_size": 8192}, {"num_hidden_layers": 2}):
        head = _head_dir(tmp_path, **changes)
        with pytest.raises(InputError) as caught:
            drafter_for(LLAMA_8B, parse_speculation(f"eagle:{head}:3", 2.0))
        assert caught.value.field == "spec"
    with pytest.raises(InputError) as caught:
        drafter_for(LLAMA_8B, parse_speculation(f"eagle:{tmp_path / 'missing'}:3", 2.0))
    assert caught.value.field == "spec" and "eagle:PATH:K" in caught.value.fix


def test_a_model_without_a_bundled_head_prices_a_full_vocabulary_head_and_says_so() -> None:
    qwen = load_model("qwen3-8b")
    head = drafter_for(qwen, parse_speculation("eagle:3", 2.0)).head
    assert head is not None and head.assumed
    assert head.network.vocab_size == qwen.vocab_size
    assert "assumed" in head.describe() and "eagle:HEAD:K" in head.describe()
    bundled = drafter_for(LLAMA_70B, parse_speculation("eagle:3", 2.0)).head
    assert bundled is not None and not bundled.assumed and bundled.network.vocab_size == 32000
    assert "SpecForge" in bundled.describe()


def _eagle_plan(spec: str) -> Plan:
    workload = Workload(isl=2048, osl=256, batch=16, speculation=parse_speculation(spec, 2.0))
    request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=1, workload=workload)
    model, cluster = resolve_request(request)
    return plan_for_strategy(request, model, cluster, parse_strategy("tp=1"))


def test_the_export_loads_the_head_the_plan_priced_and_says_which(tmp_path: Path) -> None:
    (tmp_path / "named").mkdir()
    named = _head_dir(tmp_path / "named")
    plan = _eagle_plan(f"eagle:{named}:3")
    launch = launch_command(plan, "vllm")  # no --spec-model: the request named the head
    assert json.loads(launch.flags["serve"]["--speculative-config"]) == {
        "method": "eagle3", "model": named, "num_speculative_tokens": 3}
    priced = [note for note in launch.notes if note.startswith("the plan priced this EAGLE-3 head")]
    assert len(priced) == 1 and "32,000 draft tokens" in priced[0] and "other shapes" not in priced[0]
    # A head of other shapes given at export time is loaded, and the notes say the plan did not price it.
    (tmp_path / "other").mkdir()
    other = _head_dir(tmp_path / "other", draft_vocab_size=64000)
    notes = launch_command(plan, "sglang", other).notes
    assert any("has other shapes" in note and f"eagle:{other}:3" in note for note in notes)
    # Without a head in the request or at export time, the export still asks for one.
    with pytest.raises(InputError) as caught:
        launch_command(_eagle_plan("eagle:3"), "trtllm")
    assert caught.value.field == "spec_model"
