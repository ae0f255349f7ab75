"""The report's smaller sections: headline figures, strategy per phase, where the time goes, memory per GPU,
validation with links into the knowledge, the embedded knowledge rules, launch commands.

Each function takes contracts (and, where it needs one, the schedule) and returns escaped HTML text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from shardplan.contracts.plan import Plan
from shardplan.contracts.reports import CostReport, MemoryReport, PhaseCost, ValidationReport
from shardplan.contracts.strategy import PhaseStrategy, Strategy
from shardplan.errors import InputError
from shardplan.knowledge.rules import get_rule
from shardplan.text import counted
from shardplan.tools.launch.commands import ENGINES, launch_command
from shardplan.tools.planning.feature_words import feature_words
from shardplan.tools.report.svg import CATEGORY_COLOURS, category_of, esc, fmt_ms, fmt_num, svg_open, text, text_width
from shardplan.tools.views.phase_columns import PHASE_COLUMNS, column_label

__all__ = [
    "RULE_ID", "rule_anchor", "linkify_rules", "header_html", "strategy_html", "time_breakdown_html",
    "memory_html", "validation_html", "cited_rules", "knowledge_html", "launch_html",
]

RULE_ID = re.compile(r"\b([A-Z]{1,6}-\d{1,3})\b")
"""A knowledge rule ID in running text, e.g. TP-5."""


def rule_anchor(rule_id: str) -> str:
    """The id of the rule's entry in the page's knowledge section."""
    return f"rule-{rule_id}"


def linkify_rules(content: str, known: set[str]) -> str:
    """``content`` escaped, with every known rule ID turned into a link to its entry on the page.

    >>> linkify_rules("TP-5 <b>", {"TP-5"})
    '<a class="rule-link" href="#rule-TP-5">TP-5</a> &lt;b&gt;'
    """
    def link(match: re.Match[str]) -> str:
        rule = match.group(1)
        return f'<a class="rule-link" href="#{rule_anchor(rule)}">{rule}</a>' if rule in known else rule

    return RULE_ID.sub(link, esc(content))


# ------------------------------------------------------------------------------------------ header

_STATUS = {"ok": ("ok", "meets its targets"), "targets_missed": ("warn", "best effort: targets missed"),
           "infeasible": ("bad", "infeasible")}


def _in_flight(plan: Plan) -> str:
    """The deployment in a few words: sequences in flight, replicas or pools, batching."""
    d, w = plan.deployment, plan.request.workload
    if d is None:
        return f"batch {w.sequences:,}"
    shape = (f"{d.prefill_workers} prefill + {d.decode_workers} decode workers" if d.prefill_workers
             else counted(d.replicas, "replica"))
    if d.prefill_workers and all(p.gpu for p in d.pools):  # two GPU types: each pool's
        prefill, decode = d.pools[0], d.pools[-1]
        shape = f"{d.prefill_workers} prefill workers on {prefill.gpu} + {d.decode_workers} decode on {decode.gpu}"
    return f"{counted(d.concurrency, 'sequence', spec=',')} in flight on {shape} · {d.batching} batching"


def header_html(plan: Plan) -> str:
    """Title, request, status badge and the headline figures."""
    req, w = plan.request, plan.request.workload
    model = plan.dag.meta.model.name if plan.dag is not None else req.model
    badge, said = _STATUS[plan.status]
    targets = (f", TTFT ≤ {w.ttft_ms:g} ms" if w.ttft_ms else "") + (f", TPOT ≤ {w.tpot_ms:g} ms" if w.tpot_ms else "")
    per_node = f", {req.gpus_per_node} per node" if req.gpus_per_node else ""
    parts = [f'<header><div class="title"><h1>{esc(model)} on {esc(req.gpu_words)}</h1>'
             f'<span class="badge {badge}">{esc(said)}</span></div>'
             f'<p class="muted">input {counted(w.isl, "token", spec=",")} · output '
             f'{counted(w.osl, "token", spec=",")} · {_in_flight(plan)} · objective '
             f"{esc(w.objective)}{esc(targets)}{esc(feature_words(w))}{esc(per_node)} · policy {esc(req.policy)} · "
             f"shardplan {esc(plan.shardplan_version)}</p>"]
    f = plan.figures
    if f is not None and plan.strategy is not None:
        tiles = [("TTFT", fmt_ms(f.ttft_ms)), ("TPOT", fmt_ms(f.tpot_ms)),
                 ("throughput", f"{fmt_num(f.tokens_per_s)} tok/s"),
                 ("per GPU used", f"{fmt_num(f.tokens_per_s_per_gpu)} tok/s"),
                 ("per budget GPU", f"{fmt_num(f.tokens_per_s_per_budget_gpu)} tok/s"),
                 ("per user", f"{fmt_num(f.tokens_per_s_per_user)} tok/s"),
                 ("memory / GPU", f"{f.memory_per_gpu_gb:.1f} GB"),
                 ("GPUs used", f"{f.gpus_used} of {f.gpu_budget}")]
        if plan.validation is not None:
            errors = sum(1 for v in plan.validation.violations if v.severity == "error")
            tiles.append(("validation", "valid" if plan.validation.valid else f"{counted(errors, 'error')}"))
        parts.append('<div class="tiles">' + "".join(f'<div class="tile"><span>{esc(k)}</span><b>{esc(v)}</b></div>'
                                                     for k, v in tiles) + "</div>")
        for miss in plan.misses:
            parts.append(f'<p class="miss">misses {esc(miss.message)}</p>')
    parts.append("</header>")
    return "".join(parts)


# ---------------------------------------------------------------------------------------- strategy

_DEGREES = (("dp", "replicas"), ("pp", "pipeline stages"), ("adp", "attention DP groups"),
            ("sp", "sequence shards"), ("tp", "tensor shards"), ("ep", "expert groups"), ("mb", "microbatches"))


def strategy_html(strategy: Strategy) -> str:
    """The degrees of each phase side by side, with GPUs, expert TP and layer split."""
    phases: list[tuple[str, PhaseStrategy]] = [("prefill", strategy.prefill), ("decode", strategy.decode)]
    head = "".join(f"<th>{esc(name)}</th>" for name, _ in phases)
    rows = []
    for key, meaning in _DEGREES:
        cells = "".join(f'<td class="{"on" if getattr(p, key) > 1 else "off"}">{getattr(p, key)}</td>'
                        for _, p in phases)
        rows.append(f"<tr><th>{key} <span class=\"muted\">{esc(meaning)}</span></th>{cells}</tr>")
    rows.append("<tr><th>etp <span class=\"muted\">expert TP</span></th>"
                + "".join(f"<td>{p.etp}</td>" for _, p in phases) + "</tr>")
    rows.append("<tr><th>GPUs</th>" + "".join(f"<td><b>{p.gpus}</b></td>" for _, p in phases) + "</tr>")
    rows.append("<tr><th>SPEC</th>" + "".join(f"<td><code>{esc(p.to_spec())}</code></td>" for _, p in phases) + "</tr>")
    mode = ("disaggregated: prefill and decode on separate GPU pools joined by a KV transfer"
            if strategy.disaggregated else "prefill and decode share the same GPUs")
    return (f'<table class="strategy"><thead><tr><th></th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            f'<p class="muted">{esc(mode)} · <code>{esc(strategy.to_spec())}</code></p>')


# ------------------------------------------------------------------------------ where the time goes


def _stacked_bar(y: float, x0: float, width: float, total: float, parts: list[tuple[str, float, str]]) -> str:
    out = []
    x = x0
    for label, value, colour in parts:
        if value <= 0 or total <= 0:
            continue
        w = width * value / total
        out.append(f'<rect x="{x:.1f}" y="{y:.0f}" width="{w:.1f}" height="18" fill="{colour}">'
                   f"<title>{esc(label)}: {esc(fmt_ms(value))} ({value / total:.0%})</title></rect>")
        if w > 46:
            out.append(text(x + 4, y + 13, f"{value / total:.0%}", size=10, fill="#ffffff", weight="bold"))
        x += w
    return "".join(out)


def _critical_parts(phase: PhaseCost) -> list[tuple[str, float, str]]:
    sums = {"compute": 0.0, "communication": 0.0, "state": 0.0}
    for step in phase.critical_path:
        sums[category_of(step.kind)] += step.ms
    return [("compute on the critical path", sums["compute"], CATEGORY_COLOURS["compute"]),
            ("comm on critical path", sums["communication"], CATEGORY_COLOURS["communication"]),
            ("KV cache reads and writes", sums["state"], CATEGORY_COLOURS["state"])]


def time_breakdown_html(cost: CostReport, gpu_time: dict[str, dict[str, float]]) -> str:
    """Per phase, two bars as long as the phase: its critical path (compute, exposed communication, KV state)
    and an average GPU's time (computing, communicating without computing, idle = bubble)."""
    width, x0, bar_w = 560, 118, 430
    rows = []
    y = 6
    for name in ("prefill", "decode"):
        phase: PhaseCost = getattr(cost, name)
        rows.append(text(4, y + 12, f"{name}", size=12, weight="bold"))
        rows.append(text(width - 4, y + 12, fmt_ms(phase.latency_ms), size=11, anchor="end", fill="#475569"))
        y += 18
        rows.append(text(4, y + 13, "critical path", size=10, fill="#475569"))
        rows.append(_stacked_bar(y, x0, bar_w, phase.latency_ms, _critical_parts(phase)))
        y += 24
        if name in gpu_time:
            g = gpu_time[name]
            total = sum(g.values())
            rows.append(text(4, y + 13, "average GPU", size=10, fill="#475569"))
            rows.append(_stacked_bar(y, x0, bar_w, total, [
                ("computing", g["compute"], CATEGORY_COLOURS["compute"]),
                ("communicating, not hidden", g["communication"], CATEGORY_COLOURS["communication"]),
                ("idle (bubble)", g["idle"], "#cbd5e1")]))
            y += 24
        y += 10
    svg = svg_open(width, y, "breakdown", "where the time goes") + "".join(rows) + "</svg>"
    legend = "".join(f'<span class="chip"><i style="background:{c}"></i>{esc(t)}</span>' for t, c in (
        ("compute", CATEGORY_COLOURS["compute"]),
        ("comm on critical path / not hidden", CATEGORY_COLOURS["communication"]),
        ("KV cache state", CATEGORY_COLOURS["state"]), ("idle (pipeline bubble, waits)", "#cbd5e1")))
    table = ["<table class=\"figures\"><thead><tr><th></th><th>prefill</th><th>decode step</th></tr></thead><tbody>"]
    for column in PHASE_COLUMNS:  # the names and meanings `shardplan cost` uses
        cells = "".join(f"<td>{esc(column.show(getattr(getattr(cost, name), column.field), fmt_ms))}</td>"
                        for name in ("prefill", "decode"))
        table.append(f'<tr><th title="{esc(column.meaning)}">{esc(column_label(column, with_unit=False))}</th>'
                     f"{cells}</tr>")
    table.append("</tbody></table>")
    handoff = f'<p class="muted">KV handoff: {esc(fmt_ms(cost.kv_transfer_ms))}</p>' if cost.kv_transfer_ms else ""
    return f'<div class="scroll">{svg}</div><p class="legend">{legend}</p>{"".join(table)}{handoff}'


# ------------------------------------------------------------------------------------------ memory

_MEMORY_PARTS = (("weights", "weights_gb", "#2563eb"), ("KV cache", "kv_cache_gb", "#9333ea"),
                 ("activations", "activations_gb", "#16a34a"), ("workspace", "workspace_gb", "#94a3b8"))


def memory_html(memory: list[MemoryReport]) -> str:
    """Per GPU pool, a bar of weights, KV cache, activations and workspace against the GPU's capacity."""
    captions = [f"{pool.total_gb:.1f} / {pool.capacity_gb:g} GB" for pool in memory]
    # The bar gives way to its longest label, so that every label stays inside the drawing.
    width, x0, gap = 560, 90, 6
    bar_w = width - x0 - gap - max((text_width(caption, 10) for caption in captions), default=0) - 4
    rows = []
    y = 6
    for pool, caption in zip(memory, captions, strict=True):
        scale = max(pool.capacity_gb, pool.total_gb)
        rows.append(text(4, y + 13, pool.pool, size=12, weight="bold"))
        x = x0
        for label, attr, colour in _MEMORY_PARTS:
            value = getattr(pool, attr)
            w = bar_w * value / scale
            if w > 0:
                rows.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="18" fill="{colour}">'
                            f"<title>{esc(label)}: {value:.2f} GB</title></rect>")
            x += w
        cap_x = x0 + bar_w * pool.capacity_gb / scale
        rows.append(f'<rect x="{x0}" y="{y}" width="{cap_x - x0:.1f}" height="18" class="capacity"/>')
        rows.append(text(x0 + bar_w + gap, y + 13, caption, size=10, fill="#b91c1c" if not pool.fits else "#334155",
                         css_class="memory-label"))
        y += 30
    svg = svg_open(width, y, "memory", "memory per GPU") + "".join(rows) + "</svg>"
    legend = "".join(f'<span class="chip"><i style="background:{c}"></i>{esc(t)}</span>' for t, _, c in _MEMORY_PARTS)
    table = ['<table class="figures"><thead><tr><th>pool</th><th>weights</th><th>KV</th><th>activations</th>'
             "<th>workspace</th><th>total</th><th>capacity</th><th>max batch</th></tr></thead><tbody>"]
    for pool in memory:
        table.append(f"<tr><th>{esc(pool.pool)}</th><td>{pool.weights_gb:.1f}</td><td>{pool.kv_cache_gb:.1f}</td>"
                     f"<td>{pool.activations_gb:.1f}</td><td>{pool.workspace_gb:.1f}</td>"
                     f"<td><b>{pool.total_gb:.1f}</b></td><td>{pool.capacity_gb:g}</td><td>{pool.max_batch:,}</td></tr>")
    table.append("</tbody></table>")
    return f'<div class="scroll">{svg}</div><p class="legend">{legend} · GB per GPU</p>{"".join(table)}'


# -------------------------------------------------------------------------------------- validation


def cited_rules(plan: Plan) -> list[str]:
    """Every rule ID the page refers to: rules checked, violated, and cited in the explanation and notes."""
    ids: list[str] = []
    texts: list[str] = [plan.explanation, *plan.messages]
    if plan.validation is not None:
        ids += plan.validation.rules_checked
        for violation in plan.validation.violations:
            ids.append(violation.rule)
            texts += [violation.message, violation.fix, violation.citation]
    texts += [m.message for m in plan.misses]
    if plan.dag_cost is not None:
        texts += plan.dag_cost.notes
    for content in texts:
        ids += RULE_ID.findall(content)
    return list(dict.fromkeys(ids))


def validation_html(report: ValidationReport, known: set[str]) -> str:
    """The validators' verdict: every violation with its rule linked to the knowledge entry, or a clean bill."""
    errors = sum(1 for v in report.violations if v.severity == "error")
    verdict = ('<span class="badge ok">valid</span>' if report.valid else
               f'<span class="badge bad">{counted(errors, "error")}</span>')
    parts = [f"<p>{verdict} {counted(len(report.rules_checked), 'rule')} checked on "
             f"{counted(report.nodes, 'node', spec=',')} and "
             f"{counted(report.edges, 'edge', spec=',')}; "
             f"{counted(len(report.violations), 'finding')}."
             "</p>"]
    if report.violations:
        rows = []
        for v in report.violations:
            where = ", ".join(v.nodes[:3]) + (" …" if len(v.nodes) > 3 else "")
            rows.append(f'<tr class="{esc(v.severity)}"><td><a class="rule-link" href="#{rule_anchor(v.rule)}">'
                        f'{esc(v.rule)}</a></td><td><span class="sev {esc(v.severity)}">{esc(v.severity)}</span></td>'
                        f"<td>{linkify_rules(v.message, known)}"
                        f"<div class=\"muted\"><code>{esc(where)}</code></div></td>"
                        f"<td>{linkify_rules(v.fix, known)}</td><td class=\"muted\">{esc(v.citation)}</td></tr>")
        parts.append('<table class="violations"><thead><tr><th>rule</th><th>severity</th><th>what is wrong</th>'
                     f"<th>fix</th><th>where written</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    checked = " ".join(f'<a class="rule-chip" href="#{rule_anchor(r)}">{esc(r)}</a>' for r in report.rules_checked)
    parts.append(f'<p class="rules-checked">Rules checked: {checked}</p>')
    return "".join(parts)


def knowledge_html(rule_ids: Iterable[str]) -> str:
    """The knowledge rules the page cites, grouped by document and section, each with an anchor."""

    grouped: dict[tuple[str, str], list[str]] = {}
    missing: list[str] = []
    for rule_id in rule_ids:
        try:
            rule = get_rule(rule_id)
        except KeyError:
            missing.append(rule_id)
            continue
        body = re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(rule.text))
        grouped.setdefault((rule.doc, rule.section), []).append(
            f'<div class="rule" id="{rule_anchor(rule.id)}"><b>{esc(rule.id)}</b> '
            f'<span class="sev {esc(rule.severity)}">{esc(rule.severity)}</span> {body}</div>')
    parts = []
    for (doc, section), entries in sorted(grouped.items()):
        parts.append(f'<div class="kb-section"><h4>{esc(section)} <span class="muted">{esc(doc)}</span></h4>'
                     f"{''.join(entries)}</div>")
    for rule_id in missing:
        parts.append(f'<div class="rule" id="{rule_anchor(rule_id)}"><b>{esc(rule_id)}</b> '
                     "<span class=\"muted\">not written in the knowledge base</span></div>")
    return "".join(parts)


# ------------------------------------------------------------------------------------------ launch


def launch_html(plan: Plan) -> str:
    """The launch command for each engine, with what the engine cannot express."""

    names = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
    parts = []
    priced = plan.request.workload.engine
    # The engine the plan was priced for first, and open: its figures are that engine's.
    for index, engine in enumerate(sorted(ENGINES, key=lambda name: name != priced)):
        try:
            spec = launch_command(plan, engine)  # type: ignore[arg-type]
        except InputError as exc:
            parts.append(f"<p>{esc(names[engine])}: {esc(exc)}</p>")
            continue
        notes = "".join(f"<li>{esc(note)}</li>" for note in spec.notes) or "<li>every degree is expressed</li>"
        parts.append(f'<details class="launch"{" open" if index == 0 else ""}><summary>{esc(names[engine])}'
                     f'</summary><pre><code>{esc(spec.command)}</code></pre><ul class="notes">{notes}</ul></details>')
    return "".join(parts)
