"""``shardplan search``: ranked deployments and the Pareto frontier, or what would make the request fit."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from shardplan.cli.app import app, console, emit_json
from shardplan.cli.common import JsonFlag, request_options
from shardplan.cli.plan_text import print_fit_hints
from shardplan.cli.progress import working
from shardplan.cli.rankings import print_search
from shardplan.errors import InfeasibleError
from shardplan.tools.cost.pricing import pricing_backend
from shardplan.tools.planning.feature_words import feature_words
from shardplan.tools.planning.planner import resolve_request
from shardplan.tools.search.deployments import search


@app.command("search")
@request_options
def search_command(
    request: Any,
    top: Annotated[int, typer.Option("--top", help="How many strategies to list.")] = 10,
    as_json: JsonFlag = False,
) -> None:
    """Ranked deployments and the Pareto frontier of tokens/s/GPU against tokens/s/user."""

    spec, cl = resolve_request(request)
    try:
        with working(f"searching deployments of {spec.name} on {cl.world_size} x {cl.gpu.name}", quiet=as_json):
            result = search(spec, cl, request.workload, top=top, constraints=request.constraints)
    except InfeasibleError as exc:
        if as_json:
            emit_json({"infeasible": str(exc), "min_gpus": exc.min_gpus,
                       "hints": [hint.model_dump(mode="json") for hint in exc.hints]})
        else:
            console().print(f"[red]infeasible[/red]: {exc}")
            print_fit_hints(exc.hints, request)
        return
    if as_json:
        emit_json(result)
        return

    features = feature_words(request.workload)
    if features:
        console().print(f"priced with{features.removeprefix(',')}", markup=False)
    print_search(result, pricing_backend(cl, request.workload.engine), request.workload.slo_percentile)
