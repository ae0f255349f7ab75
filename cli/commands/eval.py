"""``shardplan eval``: the golden configurations through one or more policies, with a report."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardplan.agent.policies import make_policy
from shardplan.cli.app import app, console, emit_json, fail
from shardplan.cli.progress import working
from shardplan.cli.ray_option import BareRayFlag, RayOption, executor_choice
from shardplan.evals.cases import load_cases
from shardplan.evals.report import SUMMARY_COLUMNS, below, summarize, summary_rows, write_report
from shardplan.evals.runner import RESULTS_FILE, run_eval


@app.command("eval", cls=BareRayFlag)
def eval_command(
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help="Policy to evaluate: builtin or openai:MODEL; repeat to compare several.")] = None,
    cases: Annotated[str | None, typer.Option(
        "--cases", help="Glob or folder of case YAML files (default: the bundled golden configurations).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for results.jsonl and the reports.")] = Path(
        "eval-results"),
    resume: Annotated[bool, typer.Option(
        "--resume", help="Keep the results already in --out and run only the missing (case, policy) pairs.")] = False,
    workers: Annotated[int, typer.Option("--workers", "-w", help="Pairs run at once (threads; 1-2 is useful).")] = 1,
    ray: RayOption = None,
    fail_under: Annotated[float | None, typer.Option(
        "--fail-under", help="Exit 1 when a policy passes fewer than this share of cases (0-1).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON instead of a table.")] = False,
) -> None:
    """Run the golden configurations through each policy; write results.jsonl, report.md/json/png."""

    policies = policy or ["builtin"]
    if workers < 1:
        fail(f"--workers {workers}: give 1 or more")
    if fail_under is not None and not 0 <= fail_under <= 1:
        fail(f"--fail-under {fail_under}: give a share between 0 and 1, e.g. 0.9")
    for name in policies:
        make_policy(name)  # an unknown policy or a missing API key ends here, before any case runs
    selected = load_cases(cases)
    total = len(selected) * len(policies)
    records = _run_with_progress(run_eval, selected, policies, out, workers, resume, total, quiet=as_json,
                                 choice=executor_choice(ray, workers, local="threads"))
    summary = summarize(records)
    paths = write_report(records, out)
    failing = below(summary, fail_under) if fail_under is not None else []
    if as_json:
        emit_json({"results": str(out / RESULTS_FILE), "reports": {k: str(v) for k, v in paths.items()},
                   "policies": summary, "fail_under": fail_under, "below": failing})
    else:
        from rich.table import Table

        # Metrics as rows and policies as columns: a dozen metrics fit a terminal better down than across.
        rows = summary_rows(summary)
        table = Table("metric", *(row[0] for row in rows), title=f"shardplan eval: {len(selected)} cases")
        for i, column in enumerate(SUMMARY_COLUMNS[1:], start=1):
            table.add_row(column, *(row[i] for row in rows))
        out_console = console()
        out_console.print(table)
        for name, s in summary.items():
            if s["failed_cases"]:
                out_console.print(f"{name}: failed {', '.join(s['failed_cases'])}")
        out_console.print(f"results in {out / RESULTS_FILE}; report in {paths['markdown']}")
    if failing:
        rates = ", ".join(f"{p} {summary[p]['expectations_rate']:.0%}" for p in failing)
        fail(f"below --fail-under {fail_under:.0%}: {rates}", code=1)


def _run_with_progress(run_eval: Any, cases: Any, policies: list[str], out: Path, workers: int, resume: bool,
                       total: int, *, quiet: bool, choice: Any = None) -> Any:
    """``run_eval`` under a progress bar on stderr that stays when done (hidden with ``quiet``)."""
    with working("eval", total=total, quiet=quiet, transient=False) as step:
        def advance(record: dict[str, Any], done: int, total_pairs: int) -> None:
            mark = "ok" if record.get("passed") else "FAIL"
            step.status(f"{record['case']} [{record['policy']}] {mark}", completed=done)

        return run_eval(cases, policies, out, workers=workers, resume=resume, on_result=advance, choice=choice)
