"""Hints of an infeasible request: each names a change that makes it fit, checked by running the search again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import run_here
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardplan.contracts.plan import FitHint, PlanRequest
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.errors import InfeasibleError
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.cost.memory import weight_bytes_per_gpu
from shardplan.tools.planning.planner import plan, resolve_request
from shardplan.tools.search.deployments import search
from shardplan.tools.search.fit_hints import with_weight_dtype

LLAMA_405B = "meta-llama/Llama-3.1-405B"


def _request(model: str, gpu: str, gpus: int, workload: Workload, **extra: object) -> PlanRequest:
    return PlanRequest(model=model, gpu=gpu, gpus=gpus, workload=workload, **extra)


def _applied(request: PlanRequest, hint: FitHint) -> PlanRequest:
    """``request`` with the one change ``hint`` names."""
    workload = request.workload
    if hint.change in ("weight_dtype", "kv_dtype", "gpus"):
        return request.model_copy(update={hint.change: hint.value})
    if hint.change == "context":
        prompt = int(hint.value) - workload.osl
        shorter = workload.model_copy(update={"isl": prompt, "batch": 1 if workload.batch else None})
        return request.model_copy(update={"workload": shorter})
    assert hint.change == "batch"
    return request.model_copy(update={"workload": workload.model_copy(update={"batch": int(hint.value)})})


def _outcome(request: PlanRequest) -> InfeasibleError | None:
    """The search's InfeasibleError for ``request``, or None when it finds a deployment."""
    model, cluster = resolve_request(request)
    try:
        search(model, cluster, request.workload, top=1, constraints=request.constraints)
    except InfeasibleError as exc:
        return exc
    return None


def test_405b_on_8_h100_in_bf16_gets_fp8_weights_and_16_gpus() -> None:
    request = _request(LLAMA_405B, "H100", 8, Workload(isl=2048, osl=256))
    result = plan(request)
    assert result.status == "infeasible"
    by_change = {hint.change: hint for hint in result.hints}
    assert by_change["weight_dtype"].value == "fp8"
    assert by_change["gpus"].value == 16 == result.min_gpus
    # The weight figure is the memory model's own: fp8 weights of the 405B on tp=8, per GPU.
    model, _ = resolve_request(request)
    fp8_per_gpu = weight_bytes_per_gpu(with_weight_dtype(model, "fp8"), PhaseStrategy(tp=8)) / 1e9
    assert f"{fp8_per_gpu:.1f} GB per GPU" in by_change["weight_dtype"].text
    assert 45 < fp8_per_gpu < 55  # 405 B parameters at one byte, over 8 GPUs
    # The weights alone overflow 8 GPUs, so neither an fp8 KV cache nor a shorter context can help.
    assert "kv_dtype" not in by_change and "context" not in by_change
    assert _outcome(request.model_copy(update={"kv_dtype": "fp8"})) is not None


def test_every_hint_of_the_405b_request_fits_and_the_gpu_count_is_the_fewest() -> None:
    request = _request(LLAMA_405B, "H100", 8, Workload(isl=2048, osl=256))
    exc = _outcome(request)
    assert exc is not None and exc.hints
    for hint in exc.hints:
        assert _outcome(_applied(request, hint)) is None, hint
    # Fewer GPUs than the hint's count (whole nodes of 8 above the 8 given) do not fit: 8 is the request itself.
    assert _outcome(request.model_copy(update={"gpus": 8})) is not None


def test_a_long_context_on_one_gpu_gets_the_longest_context_that_fits() -> None:
    request = _request("Qwen/Qwen3-32B", "H100", 1, Workload(isl=32768, osl=256))
    exc = _outcome(request)
    assert exc is not None
    context = next(hint for hint in exc.hints if hint.change == "context")
    assert 256 < int(context.value) < 32768 + 256
    assert f"at most {context.value} tokens" in context.text
    assert _outcome(_applied(request, context)) is None
    # The longest: one token more of prompt no longer fits.
    longer = _applied(request, context.model_copy(update={"value": int(context.value) + 1}))
    assert _outcome(longer) is not None


def test_too_many_sequences_get_the_most_that_fit() -> None:
    # A static batch must fit whole; under continuous batching the engine would queue the sequences it cannot hold.
    request = _request("meta-llama/Llama-3.1-8B", "L40S", 1, Workload(isl=16000, osl=1000, batch=64, batching="static"))
    assert _outcome(request.model_copy(update={"workload": request.workload.model_copy(
        update={"batching": "continuous"})})) is None
    exc = _outcome(request)
    assert exc is not None
    batch = next(hint for hint in exc.hints if hint.change == "batch")
    assert 1 <= int(batch.value) < 64
    assert _outcome(_applied(request, batch)) is None
    assert _outcome(_applied(request, batch.model_copy(update={"value": int(batch.value) + 1}))) is not None


_MODELS = ["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B",
           "mistralai/Mixtral-8x7B-v0.1", "openai/gpt-oss-20b"]


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(_MODELS),
    gpu=st.sampled_from(["L40S", "A100-40GB", "H100"]),
    gpus=st.sampled_from([1, 2, 4]),
    isl=st.sampled_from([2048, 32768, 100000]),
    batch=st.sampled_from([None, 16, 64]),
)
def test_a_listed_hint_always_fits_and_an_unlisted_dtype_never_does(
    model: str, gpu: str, gpus: int, isl: int, batch: int | None
) -> None:
    model_spec = load_model(model)
    if isl + 256 > model_spec.max_position_embeddings:
        return
    request = _request(model, gpu, gpus, Workload(isl=isl, osl=256, batch=batch))
    exc = _outcome(request)
    if exc is None:
        return
    listed = {hint.change for hint in exc.hints}
    for hint in exc.hints:
        assert _outcome(_applied(request, hint)) is None, hint
    if "kv_dtype" not in listed and model_spec.kv_dtype != "fp8":
        assert _outcome(request.model_copy(update={"kv_dtype": "fp8"})) is not None
    if "weight_dtype" not in listed and model_spec.weight_dtype in ("bf16", "fp16"):
        assert _outcome(request.model_copy(update={"weight_dtype": "fp8"})) is not None


def test_cli_names_the_options_that_make_it_fit_and_the_json_plan_holds_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    result = run_here(capsys, "plan", "-m", LLAMA_405B, "--gpu", "H100", "--gpus", "8", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "--weight-dtype fp8" in result.stdout and "--gpus 16" in result.stdout
    saved = json.loads(out.read_text())
    assert saved["status"] == "infeasible"
    assert {(h["change"], h["value"]) for h in saved["hints"]} == {("weight_dtype", "fp8"), ("gpus", 16)}


def test_the_search_tool_and_the_plan_carry_the_same_hints() -> None:
    from shardplan.tools.api import capabilities

    summary = capabilities.search_strategies(model=LLAMA_405B, gpu="H100", gpus=8, isl=2048, osl=256)
    planned = plan(_request(LLAMA_405B, "H100", 8, Workload(isl=2048, osl=256)))
    assert not summary.feasible and summary.hints == planned.hints
    assert next(h for h in summary.hints if h.change == "gpus").value == summary.min_gpus


def test_docstring_examples_run() -> None:
    import doctest

    from shardplan.tools.search import fit_hints

    assert doctest.testmod(fit_hints).failed == 0


def test_the_agent_answers_an_infeasible_request_with_the_hints() -> None:
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from shardplan.agent.graph import build_graph, recursion_limit
    from shardplan.agent.run import plan_from_state, request_message

    request = _request(LLAMA_405B, "H100", 8, Workload(isl=2048, osl=256))
    graph = build_graph("builtin", checkpointer=InMemorySaver())
    payload = {"messages": [HumanMessage(content=request_message(request))],
               "given_request": request.model_dump(mode="json")}
    state = graph.invoke(payload, {"configurable": {"thread_id": "hints"}, "recursion_limit": recursion_limit(None)})
    planned = plan_from_state(state)
    assert planned.status == "infeasible" and planned.hints == plan(request).hints
    answer = next(m.content for m in reversed(state["messages"]) if isinstance(m, AIMessage))
    assert all(f"It would fit with {hint.text}." in answer for hint in planned.hints)
