"""``shardplan plan``: the main job, through the planning graph and its policy (or a review of a given strategy)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.agent.run import progress_line, run_plan
from shardplan.cli.app import app, console, emit_json
from shardplan.cli.choice_text import print_choice
from shardplan.cli.common import JsonFlag, SeveralEngines, SeveralGpus, request_options
from shardplan.cli.plan_text import print_plan
from shardplan.cli.price_options import GpuPriceOption, PricesOption, given_prices
from shardplan.cli.progress import working
from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.strategy import parse_strategy
from shardplan.errors import InputError
from shardplan.io import write_atomic
from shardplan.text import counted
from shardplan.tools.planning.engine_choice import plan_engines
from shardplan.tools.planning.gpu_choice import parse_gpu_types, plan_gpu_types
from shardplan.tools.planning.planner import plan as plan_one
from shardplan.tools.planning.planner import review


@app.command("plan")
@request_options
def plan_command(
    request: Any,
    policy: Annotated[
        str, typer.Option("--policy", help="builtin, or openai:MODEL for an OpenAI-compatible endpoint.")
    ] = "builtin",
    strategy: Annotated[
        str | None,
        typer.Option("--strategy", "-s", help="Review this SPEC instead of searching: its plan, and what beats it."),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the plan JSON here.")] = None,
    gpu_price: GpuPriceOption = None,
    prices: PricesOption = None,
    as_json: JsonFlag = False,
    gpu_types: SeveralGpus | None = None,
    engines: SeveralEngines | None = None,
) -> None:
    """Plan a deployment: search, build the DAG, validate it, price it, explain the choice.

    --gpu may name several types (H100,H200,B200) or any (every priced catalog GPU): each is planned and the
    cheapest per million output tokens that meets the targets is the answer, with a table of the others. --engine
    may name several engines (vllm,sglang) or auto (all three), chosen the same way on each GPU type."""
    given = given_prices(gpu_price, prices)
    price = given.get(request.gpu)
    if price is not None:
        request = request.model_copy(update={"price": price})
    if request.decode_gpu is not None and given.get(request.decode_gpu) is not None:
        request = request.model_copy(update={"decode_price": given[request.decode_gpu]})
    types = parse_gpu_types(gpu_types.text, given) if gpu_types is not None else None
    several = [(name, text) for name, text, asked in (("gpu", "GPU types in --gpu", types),
                                                       ("engine", "engines in --engine", engines)) if asked]
    if several and strategy is not None:
        name, text = several[0]
        raise InputError(f"--strategy with several {text}", field=name,
                         fix=f"review a strategy on one {name}: name one in --{name}")
    if several and policy != "builtin":
        raise InputError(f"--policy {policy} with several {several[0][1]}", field="policy",
                         fix=f"several are planned by the builtin planner: leave out --policy, or name one "
                             f"--{several[0][0]}")

    def planner(one: PlanRequest) -> Plan:  # several engines are chosen among on each GPU type
        return plan_engines(one, list(engines)) if engines else plan_one(one)

    with working("planning", quiet=as_json) as step:
        if types is not None and gpu_types is not None:
            step.status(f"planning on {len(types)} GPU types: {', '.join(types)}"
                        + (f", each under {counted(len(engines), 'engine')}" if engines else ""))
            plan = plan_gpu_types(request, types, given, gpu_types.budget, gpu_types.gpus_per_node, planner)
        elif engines:
            step.status(f"planning under {counted(len(engines), 'engine')}: {', '.join(engines)}")
            plan = planner(request)
        elif strategy is not None:
            step.status(f"reviewing {strategy} against the searched deployments")
            plan = review(request, parse_strategy(strategy))
        else:
            plan = run_plan(request, progress=not as_json, show=lambda line: step.line(progress_line(line)))
    if output is not None:
        write_atomic(output, plan.model_dump_json(indent=1))
    if as_json:
        emit_json(_plan_summary(plan) if output is not None else plan)
        return
    print_plan(plan)
    for choice in (plan.gpu_choice, plan.engine_choice):
        if choice is not None:
            print_choice(choice)
    if output is not None:
        console().print(f"plan written to {output}")


def _plan_summary(plan: Any) -> dict[str, Any]:
    data = plan.model_dump(mode="json", exclude={"dag"})
    return data
