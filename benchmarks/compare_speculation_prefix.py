"""Speculative decoding and prefix caching: shardplan against AIConfigurator, and against public MTP rows.

**Table 1, the same requests to both tools.** Each request of :mod:`feature_requests` fixes a deployment
(model, GPUs, one worker's layout, batch, lengths, batching, engine: vLLM, and the speculation requests again
on TensorRT-LLM, where AIConfigurator's DeepSeek model prices the all-reduces the engine runs) and is priced
without and with its feature by ``aiconfigurator cli estimate`` (0.12.0; ``--estimate-mode static`` for a static batch,
``agg`` for continuous batching) and by ``shardplan plan -s SPEC --batch N --batching ...``. The table
gives both tools' TTFT and TPOT, feature off and on, shardplan's error against AIConfigurator, and each
tool's effect of the feature (on / off), which separates the feature's pricing from the baseline's.

What AIConfigurator 0.12.0 models (read from its code: ``aiconfigurator/sdk/speculative.py``,
``aiconfigurator_core/sdk/models/helpers.py`` ``mtp_scale_factor``, ``backends/base_backend.py``
``run_agg``/``run_mixed``, and aic-core's ``engine/runtime.rs`` and ``operators/attention.rs``, github.com/
ai-dynamo/aiconfigurator):

* ``--nextn K --nextn-accepted A``: one decode iteration runs every decode op at batch ``b x (K+1)`` (the
  verify of the last token and K drafts, each query token priced as a sequence of its own, so the decode
  attention reads each sequence's KV cache K+1 times), and every decode op's count is scaled by
  ``(L+K)/L``: the drafts are K more layers shaped like the target's decoder layers (the embedding and
  the LM head are scaled by the same (L+K)/L, not run K more times). Those K layers also run at
  ``b x (K+1)`` tokens, where an engine's draft passes run at ``b``. The iteration's cost is then divided
  by ``1 + A`` tokens (TPOT), and the decode iterations of a request number ``1 + (osl-1)/(1+A)``;
  acceptance never changes the iteration's own cost. Prefill is unchanged (TTFT: no MTP pass over the
  prompt). In continuous batching (``agg``) a mixed step prices its decode tokens' non-attention work with
  the prefill ops at ``ctx + b x (K+1)`` tokens, without the draft layers' GEMMs (their attention is kept);
  decode-only steps carry all of them. The flag is taken for any model, with or without MTP layers
  (Llama-3.1-8B: no warning): for a model without them it prices a hypothetical K-layer MTP module, so only
  models that ship MTP layers are asked here.
* ``--prefix P`` (cached tokens per prompt): prefill runs its GEMMs, norms and communication on the
  ``isl - P`` new tokens of each prompt; context attention is the table's full ``isl``-token causal
  attention scaled by ``(isl^2 - P^2) / isl^2``, so the new tokens still attend over the cached prefix (for
  DeepSeek on vLLM the op so scaled is the measured MLA module, its projections included: 311 ms at 8 x 4k
  tokens, 136 ms behind a 3k prefix, 0.4375 of it);
  decode is unchanged (its KV holds the whole prompt). In continuous batching a mixed step's token budget
  still counts the full prompt (``ceil(isl x b / ctx_tokens)`` steps), each step cheaper.

shardplan takes the same request as ``--spec mtp:K --spec-accept A`` and ``--prefix-hit P/isl``; what it
models is in its cost report (``CostReport.speculation``, ``CostReport.prefix_cache``).

Two things AIConfigurator prices that shardplan does not, and why the table keeps them apart:

* **DeepSeek on vLLM: two all-reduces a layer counted twice** (:mod:`aic_double_count`). Its DeepSeek model
  composes the two all-reduces vLLM runs per layer and keeps its dispatch ops' two more, so a prefill of 16 x 1k
  tokens carries 113 ms of all-reduces vLLM does not run (866.7 ms, 13%). For the DeepSeek requests the script
  also reads AIConfigurator's per-op breakdown (``--detail time``, stored beside the figures) and prints the
  medians against its estimate less those ops too; the table itself keeps AIConfigurator's own figures.
* **Continuous batching's TTFT** (``backends/vllm_backend.py``): the prefill step plus 0.8 ms a layer of
  host dispatch (``_prefill_dispatch_overhead_ms``, applied in ``agg`` only, not to a static prefill), times
  ``1 + log2(b) / 8`` (``_ttft_queuing_factor``: 1.625 at 32 sequences, whatever the load), both fitted to
  its silicon corpus. shardplan's is a closed loop's own queue: the step under way, then the prompt's pass.
  Both answer the same question (``b`` sequences in flight, mean TTFT); the figures differ by these terms.

**Table 2, public measured MTP rows** (:mod:`speculation_rows`): every speculative row of
``calibration/end_to_end.yaml`` priced by shardplan with the acceptance its source states, or left out
with the reason.

AIConfigurator's figures are stored with the exact call (``data/aic_speculation_prefix.json``):
``--stored`` reads them instead of running AIConfigurator, so the table reruns where it is not installed.

Usage::

    .venv/bin/python benchmarks/compare_speculation_prefix.py [--markdown] [--cases GLOB,...] [--jobs N]
        [--stored | --save-aic] [--skip-public] [--json FILE] [--aic-venv DIR] [--shardplan PATH]
"""

from __future__ import annotations

import json
import math
import shlex
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from aic_double_count import Breakdown, run_breakdown
from aiconfigurator_cli import AIC_VERSION, AicError
from aiconfigurator_run import ensure_aiconfigurator, estimate_command, run_command
from comparison_tables import comparison_parser, parse_comparison, print_tables, select_labelled
from feature_requests import (
    FEATURE_REQUESTS,
    FeatureRequest,
    aic_feature_options,
    shardplan_feature_options,
    shardplan_options,
)
from shardplan_pick import run_shardplan
from speculation_results import (
    FeatureRow,
    Figures,
    PublicResult,
    feature_cells,
    feature_summary,
    public_cells,
    public_summary,
)
from speculation_rows import PublicRow, measured_tpot_ms, public_rows, row_options

__all__ = ["Figures", "FeatureRow", "aic_commands", "feature_cells", "feature_summary", "public_cells", "main"]

HERE = Path(__file__).resolve().parent
STORED = HERE / "data" / "aic_speculation_prefix.json"
END_TO_END = HERE / "calibration" / "end_to_end.yaml"


def aic_commands(request: FeatureRequest, executable: str = "aiconfigurator") -> tuple[list[str], list[str]]:
    """The ``cli estimate`` command lines of the request, feature off and on."""
    base = estimate_command(
        executable, request.aic_model, request.gpu, request.isl, request.osl, request.deployment, request.moe,
        static=request.batching == "static", backend=request.engine,
    )
    return base, [*base, *aic_feature_options(request)]


def detail_commands(request: FeatureRequest, executable: str = "aiconfigurator") -> tuple[list[str], ...]:
    """The same calls with their per-op breakdown printed (``--detail time``), for the requests its DeepSeek model
    prices (:mod:`aic_double_count`); none for the others."""
    if not request.aic_model.startswith("deepseek-ai/"):
        return ()
    return tuple([*command, "--detail", "time"] for command in aic_commands(request, executable))


# --------------------------------------------------------------------------------------------------------
# Running the tools


def _own(shardplan: str, options: list[str], timeout_s: float) -> Figures:
    pick, _ = run_shardplan(shardplan, options, timeout_s)
    if pick.deployment is None or math.isnan(pick.tpot_ms):
        raise RuntimeError("; ".join(pick.notes) or pick.status)
    return Figures(pick.ttft_ms, pick.tpot_ms)


def _stored_figures(stored: dict[str, Any], request: FeatureRequest) -> tuple[Figures, Figures]:
    """AIConfigurator's stored figures of the request, checked to come from the call the script makes now."""
    entry = stored.get(request.label)
    if entry is None:
        raise AicError("no stored AIConfigurator figures: rerun with AIConfigurator installed (--save-aic)")
    figures = []
    for key, command in zip(("off", "on"), aic_commands(request), strict=True):
        if entry[key]["command"] != shlex.join(command):
            raise AicError(f"stored {key} figures came from another call: {entry[key]['command']}")
        figures.append(Figures(entry[key]["ttft_ms"], entry[key]["tpot_ms"]))
    return figures[0], figures[1]


def _stored_detail(stored: dict[str, Any], request: FeatureRequest) -> dict[str, Breakdown]:
    """AIConfigurator's stored per-op breakdowns of the request, where it has them from the calls made now."""
    entry, found = stored.get(request.label, {}), {}
    for key, command in zip(("off", "on"), detail_commands(request), strict=False):
        detail = entry.get(key, {}).get("detail")
        if detail is None:
            continue
        if detail["command"] != shlex.join(command):
            raise AicError(f"stored {key} breakdown came from another call: {detail['command']}")
        found[key] = Breakdown(**{k: v for k, v in detail.items() if k != "command"})
    return found


def run_request(request: FeatureRequest, aic: Path | None, stored: dict[str, Any], shardplan: str,
                timeout_s: float) -> FeatureRow:
    """The four pricings of one request (AIConfigurator's from ``stored`` when ``aic`` is None)."""
    row = FeatureRow(request)
    print(f"[{request.label}] running", file=sys.stderr, flush=True)
    try:
        if aic is None:
            row.aic_off, row.aic_on = _stored_figures(stored, request)
            row.aic_detail = _stored_detail(stored, request)
        else:
            estimates = [run_command(command, timeout_s) for command in aic_commands(request, str(aic))]
            row.aic_off, row.aic_on = (Figures(each.ttft_ms, each.tpot_ms) for each in estimates)
            row.aic_detail = {key: run_breakdown(command, timeout_s)
                              for key, command in zip(("off", "on"), detail_commands(request, str(aic)), strict=False)}
    except AicError as error:
        row.notes.append(f"AIC: {error}")
    for attribute, options in (("own_off", shardplan_options(request)),
                               ("own_on", [*shardplan_options(request), *shardplan_feature_options(request)])):
        try:
            setattr(row, attribute, _own(shardplan, options, timeout_s))
        except (RuntimeError, OSError, ValueError, KeyError) as error:
            row.notes.append(f"shardplan {attribute.removeprefix('own_')}: {error}")
    if row.own_on is not None and row.own_on == row.own_off:
        row.notes.append("shardplan's figures do not change with the feature")
    return row


def run_public(public: PublicRow, shardplan: str, timeout_s: float) -> PublicResult:
    result = PublicResult(public, measured_tpot_ms(public.row))
    try:
        result.own_off = _own(shardplan, row_options(public, with_spec=False), timeout_s)
        result.own_on = _own(shardplan, row_options(public, with_spec=True), timeout_s)
    except (RuntimeError, OSError, ValueError, KeyError) as error:
        result.error = f"shardplan: {error}"
    return result


def save_stored(rows: list[FeatureRow], path: Path) -> None:
    """AIConfigurator's figures with the exact call that gave each (the executable written as ``aiconfigurator``)."""
    entries: dict[str, Any] = json.loads(path.read_text()).get("requests", {}) if path.exists() else {}
    for row in rows:
        if row.aic_off is None or row.aic_on is None:
            continue
        commands = aic_commands(row.request)
        entries[row.request.label] = {
            key: {"command": shlex.join(command), **asdict(figures)}
            for key, command, figures in zip(("off", "on"), commands, (row.aic_off, row.aic_on), strict=True)
        }
        for key, command in zip(("off", "on"), detail_commands(row.request), strict=False):
            if key in row.aic_detail:
                entries[row.request.label][key]["detail"] = {"command": shlex.join(command),
                                                             **asdict(row.aic_detail[key])}
    path.write_text(json.dumps({"aiconfigurator": AIC_VERSION, "requests": entries}, indent=1) + "\n")


def select(patterns: str | None) -> list[FeatureRequest]:
    return select_labelled(FEATURE_REQUESTS, patterns)


def main(argv: list[str] | None = None) -> int:
    parser = comparison_parser(__doc__.split("\n\n")[0],
                               "comma-separated labels or globs of table 1 (default: every request)",
                               HERE / ".aic-venv")
    parser.add_argument("--stored", action="store_true", help=f"AIConfigurator's figures from {STORED.name}")
    parser.add_argument("--save-aic", action="store_true", help=f"write AIConfigurator's figures to {STORED.name}")
    parser.add_argument("--skip-public", action="store_true", help="leave out table 2 (public MTP rows)")
    args, requests = parse_comparison(parser, argv, select)
    aic: Path | None = None
    stored: dict[str, Any] = {}
    if args.stored:
        stored = json.loads(STORED.read_text())["requests"]
    else:
        try:
            aic = ensure_aiconfigurator(args.aic_venv)
        except AicError as error:
            print(f"skipped: AIConfigurator is not available ({error}); --stored reads its stored figures")
            return 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda r: run_request(r, aic, stored, args.shardplan, args.timeout), requests))
        publics = [] if args.skip_public else public_rows(yaml.safe_load(END_TO_END.read_text()))
        priced = [p for p in publics if p.reason is None]
        results = list(pool.map(lambda p: run_public(p, args.shardplan, args.timeout), priced))
    if args.save_aic and aic is not None:
        save_stored(rows, STORED)
    tables = {f"shardplan vs AIConfigurator {AIC_VERSION}: the same deployments, feature off and on":
              [feature_cells(row) for row in rows]}
    if results:
        tables["shardplan vs public measured MTP rows (acceptance as each source states it)"] = [
            public_cells(result) for result in results]
    print_tables(tables, args.markdown)
    print("\n".join(feature_summary(rows)))
    if results:
        print(public_summary(results))
    for public in publics:
        if public.reason is not None:
            print(f"left out: {public.id}: {public.reason}")
    if args.json:
        args.json.write_text(json.dumps({"requests": [asdict(row) for row in rows],
                                         "public": [asdict(result) for result in results]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
