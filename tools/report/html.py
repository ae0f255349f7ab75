"""One self-contained HTML page for a plan: everything inline (CSS, SVG, a little vanilla JavaScript), no
network, no external file, so it can be mailed, archived and opened offline.

Sections: headline figures; strategy per phase; where the time goes; memory per GPU; the Pareto frontier
of the alternatives; for a plan simulated under its traffic, the TTFT and TPOT distributions beside the targets;
the simulated schedule per GPU; the DAG collapsed per stage and layer run,
expandable; the validation report with rule links; launch commands; the explanation; the knowledge rules
the page cites. An infeasible plan gets a page that says why nothing fits.
"""

from __future__ import annotations

from shardplan.contracts.economics import Economics, economics_lines
from shardplan.contracts.plan import Plan
from shardplan.tools.cost.calibration import calibration
from shardplan.tools.report.dagview import dag_section
from shardplan.tools.report.features import features_html
from shardplan.tools.report.latency import latency_html
from shardplan.tools.report.panels import (
    cited_rules,
    header_html,
    knowledge_html,
    launch_html,
    linkify_rules,
    memory_html,
    strategy_html,
    time_breakdown_html,
    validation_html,
)
from shardplan.tools.report.pareto import dominates, pareto_front, pareto_svg, plan_points
from shardplan.tools.report.svg import esc, fmt_ms, fmt_num
from shardplan.tools.report.timeline import (
    gpu_time_breakdown,
    node_lanes,
    phase_windows,
    planned_schedule,
    timeline_legend,
    timeline_svg,
)

__all__ = ["render_report"]

_CSS = """
:root{--ink:#0f172a;--muted:#64748b;--line:#e2e8f0;--card:#ffffff;--bg:#f1f5f9;--accent:#2563eb}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--ink);font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
main{max-width:1260px;margin:0 auto;padding:18px 20px 40px}
header{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 18px;margin-bottom:14px}
.title{display:flex;align-items:center;gap:12px;flex-wrap:wrap}
h1{font-size:21px;margin:0}
h2{font-size:16px;margin:0 0 10px}
h3{font-size:14px;margin:14px 0 6px}
h4{font-size:13px;margin:10px 0 4px}
.muted{color:var(--muted);font-weight:normal}
.tiles{display:grid;grid-template-columns:repeat(auto-fit,minmax(120px,1fr));gap:8px;margin-top:10px}
.tile{border:1px solid var(--line);border-radius:8px;padding:6px 10px;background:#f8fafc}
.tile span{display:block;font-size:11px;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.tile b{font-size:17px}
.badge{display:inline-block;border-radius:999px;padding:2px 10px;font-size:12px;font-weight:600}
.badge.ok{background:#dcfce7;color:#166534}.badge.warn{background:#fef3c7;color:#92400e}
.badge.bad{background:#fee2e2;color:#991b1b}
.miss{color:#b45309;margin:6px 0 0}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:14px}
section.card{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:14px 18px;
  margin-bottom:14px;min-width:0}
table{border-collapse:collapse;width:100%;font-size:13px;margin-top:8px}
th,td{border-bottom:1px solid var(--line);padding:4px 8px;text-align:left;vertical-align:top}
thead th{background:#f8fafc;font-weight:600}
table.strategy td{text-align:center;font-variant-numeric:tabular-nums}
table.strategy td.on{background:#eff6ff;font-weight:700;color:#1d4ed8}
table.strategy td.off{color:#94a3b8}
table.figures td{font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
pre{background:#0f172a;color:#e2e8f0;padding:10px 12px;border-radius:8px;overflow-x:auto;white-space:pre}
.scroll{overflow-x:auto;max-width:100%}
.legend{margin:6px 0;line-height:2}
.chip{display:inline-flex;align-items:center;gap:5px;border:1px solid var(--line);border-radius:999px;padding:0 8px;
  margin:0 4px 2px 0;font-size:11px;background:#fff}
.chip i{display:inline-block;width:10px;height:10px;border-radius:2px}
.chip i.striped{background:repeating-linear-gradient(45deg,#dc2626 0 3px,#fecaca 3px 5px)}
.dot{display:inline-block;width:9px;height:9px;border-radius:50%;margin-right:5px}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
svg .grid{stroke:#e2e8f0;stroke-width:1}
svg .lane{fill:#f8fafc}
svg .frame{fill:none;stroke:#cbd5e1}
svg .capacity{fill:none;stroke:#0f172a;stroke-width:1.2;stroke-dasharray:3 2}
svg .frontier{fill:none;stroke:#2563eb;stroke-width:2;stroke-dasharray:5 3}
svg circle.dot{fill:#94a3b8;stroke:#fff;stroke-width:1}
svg circle.front-dot{fill:#2563eb}
svg circle.chosen-dot{fill:#dc2626}
svg circle.ring{fill:none;stroke:#dc2626;stroke-width:2}
svg .flow{stroke:#94a3b8;stroke-width:1.5;fill:none}
svg .flow.pipeline{stroke:#b45309;stroke-width:2}
svg .edge{fill:none;stroke:#94a3b8;stroke-width:1.1}
svg .edge.pipeline{stroke:#b45309;stroke-width:2}
svg .edge.sync{stroke-dasharray:4 3}
svg .edge.state{stroke:#a855f7}
svg g.block,svg g.node[data-open]{cursor:pointer}
svg g.block:hover rect:first-child,svg g.node[data-open]:hover rect{stroke-width:2.5}
details{border:1px solid var(--line);border-radius:8px;padding:6px 10px;margin:6px 0;background:#fff}
details>summary{cursor:pointer}
details.flash{box-shadow:0 0 0 3px #93c5fd}
.violations tr.error td:first-child{border-left:3px solid #dc2626}
.sev{font-size:11px;border-radius:4px;padding:0 5px;background:#e2e8f0}
.sev.error,.sev.mandatory{background:#fee2e2;color:#991b1b}
.sev.warning,.sev.recommended{background:#fef3c7;color:#92400e}
.sev.info,.sev.informational{background:#e0f2fe;color:#075985}
.rule{padding:4px 0;border-bottom:1px dashed var(--line)}
.rule:target{background:#fef9c3}
a.rule-chip{display:inline-block;font-size:11px;border:1px solid var(--line);border-radius:4px;padding:0 5px;margin:1px;
  text-decoration:none;color:var(--accent)}
.notes li{margin:2px 0}
.why{color:var(--muted);font-size:12px}
footer{color:var(--muted);font-size:12px;text-align:center;margin-top:20px}
"""

# Opens the details a clicked block or node points to (and its ancestors), then marks the page ready.
_JS = """
(function () {
  function openTarget(id) {
    var target = document.getElementById(id);
    if (!target) { return; }
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === 'DETAILS') { el.open = true; }
    }
    target.scrollIntoView({block: 'start'});
    target.classList.add('flash');
    setTimeout(function () { target.classList.remove('flash'); }, 1500);
  }
  var clickable = document.querySelectorAll('[data-open]');
  for (var i = 0; i < clickable.length; i++) {
    (function (el) {
      var go = function () { openTarget(el.getAttribute('data-open')); };
      el.addEventListener('click', go);
      el.addEventListener('keydown', function (ev) { if (ev.key === 'Enter') { go(); } });
    })(clickable[i]);
  }
  var toggles = document.querySelectorAll('button[data-toggle]');
  for (var j = 0; j < toggles.length; j++) {
    toggles[j].addEventListener('click', function (ev) {
      var open = ev.currentTarget.getAttribute('data-toggle') === 'open';
      var all = document.querySelectorAll('#dag details.block-details');
      for (var k = 0; k < all.length; k++) { all[k].open = open; }
    });
  }
  var timelines = document.querySelectorAll('svg.timeline');
  var bars = 0;
  for (var t = 0; t < timelines.length; t++) { bars += timelines[t].querySelectorAll('rect[fill]').length; }
  document.body.setAttribute('data-timeline-bars', String(bars));
  document.body.setAttribute('data-dag-blocks', String(document.querySelectorAll('svg.dag-blocks g.block').length));
  document.body.setAttribute('data-ready', '1');
})();
"""


def _card(anchor: str, title: str, body: str, extra: str = "") -> str:
    return f'<section class="card" id="{esc(anchor)}"><h2>{esc(title)}{extra}</h2>{body}</section>'


def _page(title: str, body: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title><style>{_CSS}</style></head>"
            f"<body><main>{body}<footer>shardplan report · self-contained, works offline</footer></main>"
            f"<script>{_JS}</script></body></html>\n")


def _infeasible(plan: Plan, known: set[str]) -> str:
    lines = [f"<p><b>No strategy fits.</b> {linkify_rules(plan.explanation, known)}</p>"]
    if plan.min_gpus:
        lines.append(f"<p>Fewest GPUs that would fit: <b>{plan.min_gpus}</b>.</p>")
    lines += [f'<p class="muted">{linkify_rules(m, known)}</p>' for m in plan.messages if m != plan.explanation]
    return _card("infeasible", "Infeasible", "".join(lines))


def render_report(plan: Plan) -> str:
    """The HTML page for ``plan`` (see the module docstring); text only, no I/O.

    >>> from shardplan.contracts.plan import Plan, PlanRequest
    >>> from shardplan.contracts.workload import Workload
    >>> request = PlanRequest(model="llama-3.1-8b", gpu="H100", gpus=1, workload=Workload(isl=8, osl=8))
    >>> page = render_report(Plan(shardplan_version="0", request=request, status="infeasible", strategy=None,
    ...                           explanation="does not fit (MEM-1)", min_gpus=2))
    >>> "No strategy fits" in page and 'href="#rule-MEM-1"' in page and 'id="rule-MEM-1"' in page
    True
    """
    rules = cited_rules(plan)
    known = set(rules)
    model = plan.dag.meta.model.name if plan.dag is not None else plan.request.model
    title = f"shardplan · {model} on {plan.request.gpu_words}"
    parts = [header_html(plan)]
    if plan.strategy is None:
        parts.append(_infeasible(plan, known))
    elif plan.dag_cost is None:
        parts.append(_card("strategy", "Strategy per phase", strategy_html(plan.strategy)
                           + '<p class="muted">The plan carries no cost report, so there is nothing to time.</p>'))
    else:
        parts.append(_feasible_sections(plan, known))
    parts.append(_card("knowledge", "Knowledge rules cited", knowledge_html(rules)
                       or '<p class="muted">No rule cited.</p>'))
    return _page(title, "".join(parts))


def _feasible_sections(plan: Plan, known: set[str]) -> str:
    assert plan.strategy is not None and plan.dag_cost is not None
    cost = plan.dag_cost
    sched = planned_schedule(plan)
    dag = plan.dag
    windows = phase_windows(dag, sched) if dag is not None and sched is not None else []
    gpu_time = {w.phase: gpu_time_breakdown(sched, w) for w in windows} if sched is not None else {}
    out = []
    if plan.status == "infeasible":
        title = "Does not fit" if plan.figures is not None else "Not priced for this request"
        out.append(_card("infeasible", title, f"<p>{linkify_rules(plan.explanation, known)}</p>"))
    top = [_card("strategy", "Strategy per phase", strategy_html(plan.strategy)),
           _card("time", "Where the time goes", time_breakdown_html(cost, gpu_time)),
           _card("memory", "Memory per GPU", memory_html(cost.memory)),
           _card("pareto", "Alternatives: throughput against interactivity", _pareto_html(plan))]
    out.append(f'<div class="grid2">{"".join(top)}</div>')
    features = features_html(plan)
    if features:
        out.append(_card("features", "Speculative decoding and prefix caching", features))
    if plan.simulation is not None:
        out.append(_card("latency", "Latency under the traffic, beside the targets", latency_html(plan)))
    if plan.economics is not None:
        out.append(_card("economics", "Cost and energy", _economics_html(plan.economics)))
    if dag is not None and sched is not None:
        lanes = node_lanes(dag, sched)
        body = [f'<p class="legend">{timeline_legend(dag)}</p>']
        for window in windows:
            svg, caption = timeline_svg(dag, sched, window, lanes, detailed=window.phase == "decode")
            body.append(f"<h3>{esc(window.title)}</h3><p class=\"muted\">{esc(caption)}</p>"
                        f'<div class="scroll">{svg}</div>')
        out.append(_card("timeline", "Simulated schedule per GPU", "".join(body)))
    else:
        out.append(_card("timeline", "Simulated schedule per GPU",
                         '<p class="muted">The plan carries no DAG or cluster to schedule.</p>'))
    if dag is not None:
        buttons = (' <button type="button" data-toggle="open">expand all</button> '
                   '<button type="button" data-toggle="close">collapse all</button>')
        out.append(_card("dag", "Parallel strategy DAG", dag_section(dag), buttons))
    if plan.validation is not None:
        out.append(_card("validation", "Validation", validation_html(plan.validation, known)))
    out.append(_card("launch", "Launch commands", launch_html(plan)))
    explain = [f"<p>{linkify_rules(plan.explanation, known)}</p>"]
    explain += [f'<li>{linkify_rules(m, known)}</li>' for m in plan.messages + cost.notes]
    out.append(_card("explanation", "Why this strategy", explain[0] + f"<ul>{''.join(explain[1:])}</ul>"))
    return "".join(out)


def _economics_html(economics: Economics) -> str:
    """The plan's dollars and energy, each line with the basis it rests on (the price's source, the split, the
    power model)."""
    lines = [f"<p>{esc(line)}</p>" for line in economics_lines(economics)]
    if economics.dollars is not None:
        lines.append(f'<p class="muted">Input and output split: {esc(economics.dollars.split_basis)}.</p>')
    if economics.energy is not None:
        lines.append(f'<p class="muted">Energy: {esc(economics.energy.basis)}.</p>')
    return "".join(lines)


def _stated_error(plan: Plan) -> tuple[float, float] | None:
    """The model's stated error on tokens/s per user (TPOT's) and per GPU, for the backend that priced the plan."""

    if plan.dag_cost is None or plan.dag_cost.pricing is None:
        return None
    error = calibration().held_out_error[plan.dag_cost.pricing.backend]  # what model_error_note states
    return (error.tpot_median_pct, error.throughput_median_pct)


def _ranked_by(plan: Plan) -> str:
    """What the request's objective ranks deployments by, in words."""
    w = plan.request.workload
    if w.rate is not None:
        return f"rate objective ({w.rate:g} requests/s on the fewest GPUs)"
    if w.objective == "latency":
        return "latency objective (request latency: TTFT + (osl - 1) x TPOT)"
    return f"{w.objective} objective (tokens/s the budget serves, targets first)"


def _pareto_html(plan: Plan) -> str:
    points = plan_points(plan)
    if not points:  # a given strategy with no priced figures has no point of its own to plot
        return ('<p class="muted">The reviewed strategy has no figures for this request, so there is nothing to '
                "plot.</p>")
    front = {p.spec for p in pareto_front(points)}
    rows = []
    for number, p in enumerate(points, 1):
        mark = " <b>chosen</b>" if p.chosen else (" <span class=\"muted\">frontier</span>" if p.spec in front else "")
        why = f'<div class="why">{esc(p.why_not)}</div>' if p.why_not else ""
        rows.append(f"<tr><td>{number}</td><td><code>{esc(p.spec)}</code>{mark}{why}</td>"
                    f"<td>{fmt_num(p.per_gpu)}</td><td>{fmt_num(p.per_gpu_used)}</td><td>{fmt_num(p.per_user)}</td></tr>")
    table = ('<table class="figures"><thead><tr><th>#</th><th>strategy</th><th>tok/s per budget GPU</th>'
             "<th>tok/s per GPU used</th><th>tok/s/user</th>"
             f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    note = "" if len(points) > 1 else '<p class="muted">The planner kept no alternatives.</p>'
    chosen = ""
    if plan.figures is not None:
        chosen = (f'<p class="muted">Chosen (1): TTFT {esc(fmt_ms(plan.figures.ttft_ms))}, TPOT '
                  f"{esc(fmt_ms(plan.figures.tpot_ms))}. Up and right is better; the dashed line joins the Pareto "
                  "frontier. Throughput counts every GPU of the budget, idle ones as zero, as the throughput "
                  "objective ranks deployments.</p>")
        ahead = [str(n) for n, p in enumerate(points, 1) if dominates(p, points[0])]
        if ahead:
            chosen += (f'<p class="muted">Point{"s" if len(ahead) > 1 else ""} {", ".join(ahead)} beat the chosen one '
                       f"on both axes; the {esc(_ranked_by(plan))} ranks it first.</p>")
    error = _stated_error(plan)
    band = (f" The shaded box spans the model's stated error around the chosen point (±{error[0]:.1f}% tokens/s per "
            f"user, ±{error[1]:.1f}% tokens/s per GPU): points inside it are not told apart." if error else "")
    chosen = chosen.replace("frontier.</p>", f"frontier.{esc(band)}</p>")
    tie = f'<p class="muted">Note: {esc(plan.near_tie.note)}.</p>' if plan.near_tie is not None else ""
    return f'<div class="scroll">{pareto_svg(points, error_pct=error)}</div>{chosen}{tie}{note}{table}'
