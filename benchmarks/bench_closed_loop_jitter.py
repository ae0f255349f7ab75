"""Does a small random delay before each resend break a closed loop's lockstep? The simulated steady state of
measured closed-loop rows under client send delays of 1 us to 30 ms.

Run: .venv/bin/python benchmarks/bench_closed_loop_jitter.py [--match TEXT] [--delays 0,1e-6,...]

The hypothesis tested: with identical requests the simulated clients stay in lockstep (their prompts reach the
engine as one burst a cycle), and any real per-request jitter (HTTP, client scheduling, tokenising) would make
some of a burst miss the step the engine starts and finish a step later for good, so that over the measurement
window the clients spread over the cycle, whatever the jitter's size. Each row runs as
``benchmarks/bench_closed_loop.py`` runs it (same plan, same requests, the steady state between the first and
last ``N`` requests), with ``SimulationOptions.send_delay_s``: each next request reaches the engine an
exponentially distributed time (seeded) after its client's last completion. Printed per delay: mean TTFT / TPOT
(ms) and "burst", the mean number of prompts of the steady state that entered the engine in the same step as
each one (N under full lockstep, about 1 for clients spread out).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_closed_loop import burst, simulate_point, steady  # noqa: E402
from closed_loop_rows import yaml_points  # noqa: E402

from shardplan.tools.simulation.results import latencies  # noqa: E402
from shardplan.tools.simulation.run import SimulationOptions  # noqa: E402

ROWS = (
    "nim180-llama33-70b-h100-tp2-200-200-conc25",
    "nim180-llama33-70b-h100-tp2-200-200-conc100",
    "nim180-llama33-70b-h100-tp2-1000-1000-conc25",
    "nim180-llama33-70b-h100-tp2-500-2000-conc50",
    "nim180-llama31-8b-h100-tp1-200-200-conc25",
)
DELAYS_S = (0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 3e-2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--match", help="only the NIM rows whose id contains TEXT (default: five rows)")
    parser.add_argument("--delays", help="comma-separated mean send delays in seconds")
    args = parser.parse_args(argv)
    delays = [float(d) for d in args.delays.split(",")] if args.delays else list(DELAYS_S)
    points = [p for p in yaml_points() if (args.match in p.id if args.match else p.id in ROWS)]
    print("Mean TTFT / TPOT in ms and burst (prompts entering the engine together) of the simulated steady state, "
          "by mean send delay.\n")
    print("| row | N | TTFT measured | " + " | ".join(f"{d * 1e3:g} ms" for d in delays) + " |")
    print("|---|---|---|" + "---|" * len(delays))
    for point in points:
        cells = [point.id, str(point.clients), f"{point.measured['ttft_ms']:.0f}"]
        for delay in delays:
            _, run = simulate_point(point, SimulationOptions(send_delay_s=delay))
            kept = steady(run.requests, point.clients)
            measured = latencies(run.requests)
            cells.append(f"{np.nanmean(measured.ttft_ms[kept]):.0f} / {np.nanmean(measured.tpot_ms[kept]):.1f} / "
                         f"{burst(run.requests, kept):.1f}")
        print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
