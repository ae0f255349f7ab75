"""The HTML report and the schedule trace of a real plan: sections, links, self-containment, escaping, and
the page as headless Chromium loads it (no console errors, DAG and timeline rendered, a screenshot)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from cli_helpers import ROOT, run_here

from shardplan.contracts.plan import Plan, PlanRequest
from shardplan.contracts.reports import ValidationReport, Violation
from shardplan.contracts.workload import Workload
from shardplan.tools.cost.schedule import schedule_dag
from shardplan.tools.planning.planner import plan
from shardplan.tools.report.html import render_report
from shardplan.tools.report.timeline import trace_events

SECTIONS = ("strategy", "time", "memory", "pareto", "timeline", "dag", "validation", "launch", "explanation",
            "knowledge")


@pytest.fixture(scope="module")
def real_plan() -> Plan:
    """What ``shardplan plan`` answers for Qwen3-30B-A3B on up to 8 H100 for throughput under TTFT and TPOT targets
    (a disaggregated deployment; the search chooses the concurrency)."""
    request = PlanRequest(model="Qwen/Qwen3-30B-A3B", gpu="H100", gpus=8,
                          workload=Workload(isl=2048, osl=256, objective="throughput", ttft_ms=1000, tpot_ms=20))
    result = plan(request)
    assert result.strategy is not None and result.dag is not None
    return result


@pytest.fixture(scope="module")
def page(real_plan: Plan) -> str:
    return render_report(real_plan)


class _Collector(HTMLParser):
    """Every element id, every href and src, and every tag name of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.links: list[tuple[str, str, str]] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        for name, value in attrs:
            if name == "id" and value:
                self.ids.append(value)
            if name in ("href", "src", "xlink:href", "action", "data") and value is not None:
                self.links.append((tag, name, value))


def _collect(page: str) -> _Collector:
    collector = _Collector()
    collector.feed(page)
    return collector


def test_page_has_every_section(page: str, real_plan: Plan) -> None:
    ids = set(_collect(page).ids)
    assert set(SECTIONS) <= ids
    assert page.count('<svg class="timeline"') == 2  # prefill (with the KV handoff) and the decode step
    assert '<svg class="dag-blocks"' in page and '<svg class="pareto"' in page and '<svg class="breakdown"' in page
    assert real_plan.strategy is not None
    assert real_plan.strategy.to_spec() in page
    for alternative in real_plan.alternatives:
        assert alternative.strategy in page
    assert "vllm serve Qwen/Qwen3-30B-A3B" in page and "sglang.launch_server" in page and "trtllm-serve" in page


def test_rule_links_resolve_to_embedded_knowledge(page: str, real_plan: Plan) -> None:
    collected = _collect(page)
    ids = set(collected.ids)
    assert len(ids) == len(collected.ids), "element ids are unique"
    internal = [value[1:] for _, name, value in collected.links if name == "href" and value.startswith("#")]
    assert internal and all(target in ids for target in internal)
    assert real_plan.validation is not None
    for rule in real_plan.validation.rules_checked:
        assert f'href="#rule-{rule}"' in page and f'id="rule-{rule}"' in page
    assert re.search(r'id="rule-TP-2"><b>TP-2</b> <span class="sev mandatory">mandatory</span> The partial', page)


def test_page_is_self_contained(page: str) -> None:
    collected = _collect(page)
    external = [link for link in collected.links if not link[2].startswith("#")]
    assert external == []
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert "@import" not in page and "url(http" not in page and "<link" not in page
    assert "<script src" not in page and "<iframe" not in page and "<img" not in page
    assert {"style", "script", "svg"} <= collected.tags


def test_text_is_escaped(real_plan: Plan) -> None:
    hostile = "<script>alert('x')</script> & <b>"
    assert real_plan.validation is not None
    validation = ValidationReport(valid=False, violations=[Violation(
        rule="TP-2", severity="error", message=hostile + " breaks TP-2", nodes=["<n>"], fix="fix <it>",
        citation="02-tensor-parallelism.md")], rules_checked=real_plan.validation.rules_checked, nodes=1, edges=1)
    page = render_report(real_plan.model_copy(update={"validation": validation, "explanation": hostile}))
    assert "<script>alert" not in page and "<b> breaks" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;" in page
    assert 'breaks <a class="rule-link" href="#rule-TP-2">TP-2</a>' in page
    assert "fix &lt;it&gt;" in page and "1 error" in page


def test_infeasible_plan_gets_a_page_that_says_so(real_plan: Plan) -> None:
    infeasible = Plan(shardplan_version="0", request=real_plan.request, status="infeasible", strategy=None,
                      explanation="needs 200 GB per GPU (MEM-1)", min_gpus=32)
    page = render_report(infeasible)
    assert "No strategy fits" in page and "<b>32</b>" in page and 'id="rule-MEM-1"' in page
    assert 'class="timeline"' not in page


def test_trace_has_a_complete_event_per_scheduled_node_and_rank(real_plan: Plan) -> None:
    assert real_plan.dag is not None and real_plan.dag.meta.cluster is not None
    trace = json.loads(json.dumps(trace_events(real_plan)))
    events = trace["traceEvents"]
    complete = [e for e in events if e["ph"] == "X"]
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in complete)
    per_node: dict[str, set[int]] = {}
    for event in complete:
        per_node.setdefault(event["name"], set()).add(event["pid"])
        assert event["tid"] in (0, 1, 2)
    sched = schedule_dag(real_plan.dag, real_plan.dag.meta.cluster)
    for node in real_plan.dag.nodes:
        if sched.finish[node.id] - sched.start[node.id] > 0:
            assert per_node.get(node.id) == set(node.ranks), node.id
    ranks = {r for n in real_plan.dag.nodes for r in n.ranks}
    names = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == ranks
    threads = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert threads == {"compute", "communication", "wait"}
    kinds = {e["args"]["kind"] for e in complete if e["tid"] == 1}
    assert kinds and kinds <= {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send", "kv_transfer"}


# ----------------------------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory, real_plan: Plan) -> Path:
    path = tmp_path_factory.mktemp("report") / "plan.json"
    path.write_text(real_plan.model_dump_json())
    return path


def test_cli_writes_report_and_trace(plan_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, trace = tmp_path / "report.html", tmp_path / "trace.json"
    result = run_here(capsys, "report", str(plan_file), "-o", str(out), "--trace", str(trace), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["report"] == str(out) and summary["events"] > 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert json.loads(trace.read_text())["traceEvents"]


def test_cli_bad_files_exit_2_with_one_line(
    tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = run_here(capsys, "report", str(tmp_path / "missing.json"))
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    dag_only = tmp_path / "dag.json"
    dag_only.write_text(json.dumps(json.loads(plan_file.read_text())["dag"]))
    result = run_here(capsys, "report", str(dag_only))
    assert result.returncode == 2 and "not a plan" in result.stderr and "DAG" in result.stderr
    broken = tmp_path / "broken.json"
    data = json.loads(plan_file.read_text())
    data["status"] = "maybe"
    broken.write_text(json.dumps(data))
    result = run_here(capsys, "report", str(broken))
    assert result.returncode == 2 and "status" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "broken.html").exists()


def test_cli_infeasible_plan(tmp_path: Path, plan_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    request = json.loads(plan_file.read_text())["request"]
    infeasible = tmp_path / "infeasible.json"
    infeasible.write_text(json.dumps({"shardplan_version": "0", "request": request, "status": "infeasible",
                                      "strategy": None, "explanation": "does not fit (MEM-1)", "min_gpus": 16}))
    result = run_here(capsys, "report", str(infeasible))
    assert result.returncode == 0, result.stderr
    assert "No strategy fits" in (tmp_path / "infeasible.html").read_text()
    traced = run_here(capsys, "report", str(infeasible), "--trace", str(tmp_path / "t.json"))
    assert traced.returncode == 2 and "no schedule" in traced.stderr


# ------------------------------------------------------------------------------------------ Chromium

_PROBE_HEAD = ("<script>window.addEventListener('error', function (e) {"
               "document.documentElement.setAttribute('data-js-error', String(e.message)); });</script>")
# Runs after the page's own script: clicks the first DAG block and records whether its details opened.
_PROBE_TAIL = ("<script>(function () { var b = document.querySelector('svg.dag-blocks g.block');"
               "b.dispatchEvent(new MouseEvent('click', {bubbles: true}));"
               "var d = document.getElementById(b.getAttribute('data-open'));"
               "document.body.setAttribute('data-click-opened', d && d.open ? '1' : '0'); })();</script>")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("Debian's chromium package is not installed (apt-get install -y chromium)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=180, check=False)


# Measures, as laid out by the browser: every memory label inside its drawing and right of its bar, and where
# each axis of the Pareto plot starts (its lowest tick's value and whether it sits on the frame's edge).
_LAYOUT_PROBE = (
    "<script>(function () { var body = document.body;"
    "var mem = document.querySelector('svg.memory'); var width = mem.viewBox.baseVal.width;"
    "var inside = [].slice.call(mem.querySelectorAll('text.memory-label')).map(function (t) {"
    "  var b = t.getBBox(); var bar = t.previousElementSibling.getBBox();"
    "  return b.x >= bar.x + bar.width && b.x + b.width <= width ? 1 : 0; });"
    "body.setAttribute('data-memory-labels', inside.length);"
    "body.setAttribute('data-memory-labels-inside', inside.filter(Boolean).length);"
    "var plot = document.querySelector('svg.pareto');"
    "var frame = plot.querySelector('rect.frame').getBBox();"
    "function value(t) { return parseFloat(t.textContent.replace(/,/g, '')); }"
    "function lowest(cls) { return [].slice.call(plot.querySelectorAll('text.' + cls))"
    "  .reduce(function (a, b) { return value(a) <= value(b) ? a : b; }); }"
    "var y0 = lowest('y-tick'), x0 = lowest('x-tick'); var yb = y0.getBBox(), xb = x0.getBBox();"
    "body.setAttribute('data-pareto-y-min', y0.textContent);"
    "body.setAttribute('data-pareto-x-min', x0.textContent);"
    "var yEdge = Math.abs(yb.y + yb.height / 2 - (frame.y + frame.height)) < 8;"
    "var xEdge = Math.abs(xb.x + xb.width / 2 - frame.x) < 8;"
    "body.setAttribute('data-pareto-y-at-edge', yEdge ? 1 : 0);"
    "body.setAttribute('data-pareto-x-at-edge', xEdge ? 1 : 0);"
    "})();</script>"
)


def _crowded(plan: Plan) -> Plan:
    """``plan`` as an H200 plan would read where the issue saw clipping and zoom: memory labels as long as
    "135.9 / 141 GB", and alternatives within 1-4% of the chosen deployment on both axes (no frontier)."""
    assert plan.dag_cost is not None and plan.deployment is not None and plan.figures is not None
    memory = [m.model_copy(update={"capacity_gb": 141.0, "total_gb": 135.9 - i})
              for i, m in enumerate(plan.dag_cost.memory)]
    f = plan.figures
    near = [a.model_copy(update={"figures": a.figures.model_copy(update={
        "tokens_per_s_per_budget_gpu": f.tokens_per_s_per_budget_gpu * (0.99 - 0.01 * i),
        "tokens_per_s_per_user": f.tokens_per_s_per_user * (1.01 + 0.01 * i)})})
            for i, a in enumerate(plan.alternatives[:3])]
    assert near, "the plan should keep alternatives"
    return plan.model_copy(update={"dag_cost": plan.dag_cost.model_copy(update={"memory": memory}),
                                   "alternatives": near,
                                   "deployment": plan.deployment.model_copy(update={"frontier": []})})


def test_page_loads_in_headless_chromium(real_plan: Plan, tmp_path: Path) -> None:
    page = render_report(_crowded(real_plan))
    probes = _PROBE_TAIL + _LAYOUT_PROBE
    probed = page.replace("<head>", "<head>" + _PROBE_HEAD, 1).replace("</body>", probes + "</body>", 1)
    path = tmp_path / "report.html"
    path.write_text(probed)
    result = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", path.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    console = [line for line in result.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
    assert re.search(r"<html[^>]*data-js-error", dom) is None
    assert 'data-ready="1"' in dom
    assert int(re.search(r'data-timeline-bars="(\d+)"', dom).group(1)) > 100  # type: ignore[union-attr]
    assert int(re.search(r'data-dag-blocks="(\d+)"', dom).group(1)) >= 4  # type: ignore[union-attr]
    assert 'data-click-opened="1"' in dom
    assert '<svg class="timeline"' in dom and '<svg class="dag-blocks"' in dom
    # The memory labels are not clipped, and the Pareto axes start at zero on the frame's edges.
    labels = int(re.search(r'data-memory-labels="(\d+)"', dom).group(1))  # type: ignore[union-attr]
    assert labels >= 1 and f'data-memory-labels-inside="{labels}"' in dom
    assert 'data-pareto-y-min="0"' in dom and 'data-pareto-x-min="0"' in dom
    assert 'data-pareto-y-at-edge="1"' in dom and 'data-pareto-x-at-edge="1"' in dom


def test_screenshot_of_the_report(page: str, tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    path.write_text(page)
    shot = tmp_path / "report.png"
    result = _chromium(tmp_path, "--hide-scrollbars", f"--screenshot={shot}", "--window-size=1400,2000",
                       path.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000


def test_pareto_plot_shows_the_searched_frontier_with_the_chosen_deployment(real_plan: Plan) -> None:
    from shardplan.tools.report.pareto import pareto_front, plan_points

    d = real_plan.deployment
    assert d is not None and d.frontier
    points = plan_points(real_plan)
    chosen = [p for p in points if p.chosen]
    assert len(chosen) == 1 and chosen[0].spec.endswith(f"@{d.concurrency}")
    frontier_labels = {f"{f.strategy} @{f.concurrency}" for f in d.frontier}
    assert frontier_labels <= {p.spec for p in points}
    # Nothing priced beats a frontier point on both axes.
    front = pareto_front(points)
    for p in front:
        assert not any(q.per_user > p.per_user and q.per_gpu > p.per_gpu for q in points)
    page = render_report(real_plan)
    assert "chosen" in page and f"@{d.concurrency}" in page


# Counts, as laid out by the browser, the Pareto plot's points that sit above and right of the chosen one: a point
# that beats the chosen deployment on both plotted axes.
_DOMINANCE_PROBE = (
    "<script>(function () { var plot = document.querySelector('svg.pareto');"
    "function centre(c) { var b = c.getBBox(); return [b.x + b.width / 2, b.y + b.height / 2]; }"
    "var chosen = centre(plot.querySelector('circle.chosen-dot'));"
    "var others = [].slice.call(plot.querySelectorAll('circle.dot')).filter(function (c) {"
    "  return !c.classList.contains('chosen-dot'); });"
    "var beating = others.filter(function (c) { var p = centre(c);"
    "  return p[0] > chosen[0] + 0.5 && p[1] < chosen[1] - 0.5; });"
    "document.body.setAttribute('data-pareto-points', others.length);"
    "document.body.setAttribute('data-pareto-beating', beating.length);"
    "})();</script>"
)


def test_the_first_commands_report_draws_no_point_that_beats_the_chosen_deployment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's first command: the throughput objective ranks tokens/s per GPU of the budget, and the plot's
    vertical axis is that figure, so no point sits above and right of the chosen deployment."""
    out = tmp_path / "plan.json"
    cluster = str(ROOT / "tools" / "data" / "clusters" / "h200-2x8-ib.yaml")
    planned = run_here(capsys, "plan", "--model", "Qwen/Qwen3-235B-A22B", "--cluster", cluster,
                       "--isl", "2048", "--osl", "256", "--ttft-ms", "2000", "--tpot-ms", "30", "-o", str(out))
    assert planned.returncode == 0, planned.stderr
    page = render_report(Plan.model_validate_json(out.read_text()))
    path = tmp_path / "report.html"
    path.write_text(page.replace("</body>", _DOMINANCE_PROBE + "</body>", 1))
    result = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", path.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    points = int(re.search(r'data-pareto-points="(\d+)"', result.stdout).group(1))  # type: ignore[union-attr]
    assert points >= 3, "the plot should show the searched frontier beside the chosen deployment"
    assert 'data-pareto-beating="0"' in result.stdout
