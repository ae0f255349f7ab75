"""Where shardplan's decode step differs from the public MTP rows: each priced row's step taken apart.

``compare_speculation_prefix.py`` prints each public MTP row's TPOT error and its speed-up over the same source's
figure without MTP. This script says where a row's error sits, so that it can be traced to a mechanism rather
than absorbed: for every priced row it asks ``shardplan cost`` (the row's own options, as that script does) for
the speculative decode step and, where the source gives a figure without MTP (``no_spec_value``), for the plain
step too, and prints

* the measured and predicted TPOT, and where the source has one, the measured and predicted step without MTP
  (the baseline error: the part of the TPOT error that speculation's pricing does not cause);
* the predicted step's critical path by operation kind (the four largest, in ms), and the backend that priced it;
* for a roofline-priced MoE layout with expert parallelism, the expert-load factor the roofline applies to the
  routed experts (the busiest rank's load, ``1 + imbalance_per_doubling x log2(ep)``, fitted to the measured tables'
  power-law rows over their balanced ones, times the fused kernel's per-rank EP overhead where attention is
  tensor-parallel) and the milliseconds of the step it adds.

Nothing is fitted here; the figures are read off shardplan's own cost report of the row's layout (``cost`` prices
that DAG as given; ``plan``, which the comparison script asks, may differ from it by about 1%).

Usage::

    .venv/bin/python benchmarks/speculation_gaps.py [--match TEXT] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiconfigurator_cli import parse_error
from speculation_rows import PublicRow, measured_tpot_ms, public_rows, row_options

from shardplan.contracts.strategy import parse_strategy
from shardplan.tools.catalogs.gpus import gpu_catalog
from shardplan.tools.cost.op_time import layout_expert_factor

HERE = Path(__file__).resolve().parent
END_TO_END = HERE / "calibration" / "end_to_end.yaml"
SHARDPLAN = str(Path(sys.executable).parent / "shardplan")


@dataclass(frozen=True)
class Step:
    """One priced decode step: its TPOT, critical path by operation kind (ms) and pricing backend."""

    tpot_ms: float
    by_kind: dict[str, float]
    backend: str


@dataclass(frozen=True)
class Gap:
    """One public row taken apart: the speculative step and, where the source has a figure without MTP, the plain
    one."""

    public: PublicRow
    speculative: Step | None
    plain: Step | None
    error: str = ""


def price(options: list[str]) -> Step:
    """``shardplan cost OPTIONS --json``: the decode step of the row's deployment."""
    done = subprocess.run([SHARDPLAN, "cost", *options, "--json"], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"shardplan cost exited {done.returncode}: {parse_error(done.stderr or done.stdout)}")
    report: dict[str, Any] = json.loads(done.stdout)
    by_kind: dict[str, float] = defaultdict(float)
    for entry in report["decode"]["critical_path"]:
        by_kind[entry["kind"]] += entry["ms"]
    return Step(report["figures"]["tpot_ms"], dict(by_kind), report["pricing"]["backend"])


def take_apart(public: PublicRow) -> Gap:
    try:
        speculative = price(row_options(public, with_spec=True))
        plain = price(row_options(public, with_spec=False)) if public.row.get("no_spec_value") else None
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        return Gap(public, None, None, str(error))
    return Gap(public, speculative, plain)


def _pct(ours: float, theirs: float) -> str:
    return f"{ours / theirs - 1:+.1%}"


def _kinds(step: Step) -> str:
    top = sorted(step.by_kind.items(), key=lambda item: -item[1])[:4]
    return ", ".join(f"{kind} {ms:.2f}" for kind, ms in top)


def _load_factor(gap: Gap) -> str:
    """The roofline's expert-load factor and the ms of the step it adds, for a roofline MoE layout with ep > 1."""
    step = gap.speculative
    decode = parse_strategy(gap.public.row["strategy"]).decode
    if step is None or step.backend != "roofline" or decode.ep <= 1 or "expert" not in step.by_kind:
        return "-"
    factor = layout_expert_factor(decode, gpu_catalog()[gap.public.row["gpu"]])
    # The critical path's expert time carries the factor on the routed experts only; the shared experts' share is
    # small beside them at these batches, so this is the most the factor can add (an upper bound).
    added = step.by_kind["expert"] * (1 - 1 / factor)
    return f"x{factor:.2f} (up to {added:.1f} ms)"


def rows_of(gaps: list[Gap]) -> list[str]:
    lines = ["| row | GPU, layout | TPOT measured / shardplan | err | step without MTP measured / shardplan | "
             "baseline err | predicted step: critical path by kind (ms) | backend | roofline expert-load factor |",
             "|---|---|---|---|---|---|---|---|---|"]
    for gap in gaps:
        row = gap.public.row
        measured = measured_tpot_ms(row)
        where = f"{row['gpu']} x{row['gpus']}, {row['strategy']}"
        if gap.speculative is None or measured is None:
            lines.append(f"| {gap.public.id} | {where} | - | - | - | - | {gap.error or 'not priced'} | - | - |")
            continue
        spec = gap.speculative
        base = "-"
        base_error = "-"
        if gap.plain is not None:
            measured_base = measured_tpot_ms({**row, "value": row["no_spec_value"]})  # same metric, without MTP
            assert measured_base is not None  # the row's own metric is a latency (checked above)
            base = f"{measured_base:.2f} / {gap.plain.tpot_ms:.2f}"
            base_error = _pct(gap.plain.tpot_ms, measured_base)
        lines.append(f"| {gap.public.id} | {where} | {measured:.2f} / {spec.tpot_ms:.2f} | "
                     f"{_pct(spec.tpot_ms, measured)} | {base} | {base_error} | {_kinds(spec)} | {spec.backend} | "
                     f"{_load_factor(gap)} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--match", default="", help="only the rows whose id contains TEXT")
    parser.add_argument("--jobs", type=int, default=2, help="rows priced at once (default 2)")
    args = parser.parse_args(argv)
    rows = yaml.safe_load(END_TO_END.read_text())
    priced = [p for p in public_rows(rows) if p.reason is None and args.match in p.id]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        gaps = list(pool.map(take_apart, priced))
    print(f"Public MTP rows taken apart ({len(gaps)} priced), decode step by operation kind:\n")
    print("\n".join(rows_of(gaps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
