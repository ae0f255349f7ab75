"""Speculative decoding: TPOT with and without it, per batch, at the decode layouts of two deployments.

Run: .venv/bin/python benchmarks/bench_speculation.py [--backend auto|roofline] [--plan]

* DeepSeek-V3 on 16 H200, ``--spec mtp:1 --spec-accept 0.8``, isl 4096, osl 1024 (the issue's done-when command):
  the decode layout is the one ``shardplan plan`` chooses for it (``--plan`` runs the plan, about a minute; without
  it the layout it chose when this was written, a decode worker of ``adp=8``);
* Llama-3.1-70B on 4 H100 at ``tp=4`` with ``--spec eagle:3 --spec-accept 2.0``, isl 4096, osl 1024.

Each row is one replica (decode worker) running pure decode steps of B sequences at the mean context: the plain step
and TPOT, the speculative step (its drafting in brackets) and its TPOT (the step over A + 1), and the gain. Priced by
the serving model's step pricer (measured tables where they cover a node, the roofline elsewhere), so the figures
are those the search and the plan use.
"""

from __future__ import annotations

import argparse

from shardplan.contracts.speculation import parse_speculation
from shardplan.contracts.strategy import PhaseStrategy, parse_strategy
from shardplan.contracts.workload import Workload
from shardplan.tools.catalogs.gpus import make_cluster
from shardplan.tools.catalogs.models import load_model
from shardplan.tools.serving.steps import StepPricer

BATCHES = (1, 16, 64, 256)


def _done_when_layout() -> PhaseStrategy:
    from shardplan.contracts.plan import PlanRequest
    from shardplan.tools.planning.planner import plan

    work = Workload(isl=4096, osl=1024, tpot_ms=30, speculation=parse_speculation("mtp:1", 0.8))
    chosen = plan(PlanRequest(model="deepseek-ai/DeepSeek-V3", gpu="H200", gpus=16, workload=work))
    assert chosen.strategy is not None, chosen.explanation
    print(f"plan: {chosen.strategy.to_spec()}, TPOT {chosen.figures.tpot_ms:.2f} ms" if chosen.figures else "")
    return chosen.strategy.decode.model_copy(update={"dp": 1})


def table(title: str, model: str, gpu: str, gpus: int, layout: PhaseStrategy, spec: str, accepted: float,
          backend: str) -> None:
    """Print one deployment's rows."""
    target, cluster = load_model(model), make_cluster(gpu, gpus)
    speculation = parse_speculation(spec, accepted)
    drafting = StepPricer(target, cluster, layout, 4096, 1024, backend=backend, speculation=speculation)  # type: ignore[arg-type]
    plain = StepPricer(target, cluster, layout, 4096, 1024, backend=backend)  # type: ignore[arg-type]
    assert drafting.draft is not None
    print(f"\n{title}: {layout.to_spec()} on {layout.gpus} {gpu}, --spec {spec} --spec-accept {accepted:g}")
    print("| batch | plain step ms | spec step ms (drafting) | TPOT plain ms | TPOT spec ms | gain |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for batch in BATCHES:
        sequences = max(batch, layout.adp)
        step, base = drafting.step_s(sequences, 0), plain.step_s(sequences, 0)
        draft = drafting.draft.draft_s(sequences / drafting.lanes)
        tpot = step / drafting.tokens_per_step
        print(f"| {sequences} | {base * 1e3:.2f} | {step * 1e3:.2f} ({draft * 1e3:.2f}) | {base * 1e3:.2f} | "
              f"{tpot * 1e3:.2f} | {base / tpot:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", choices=("auto", "roofline"))
    parser.add_argument("--plan", action="store_true", help="take DeepSeek-V3's decode layout from a plan run")
    args = parser.parse_args()
    layout = _done_when_layout() if args.plan else parse_strategy("adp=8").decode
    table("DeepSeek-V3 (done-when command)", "deepseek-ai/DeepSeek-V3", "H200", 16, layout, "mtp:1", 0.8,
          args.backend)
    table("Llama-3.1-70B", "meta-llama/Llama-3.1-70B", "H100", 4, PhaseStrategy(tp=4), "eagle:3", 2.0, args.backend)


if __name__ == "__main__":
    main()
