"""Mixed-GPU split pools against one-type split pools: dollars per million output tokens of the same request.

Run: .venv/bin/python benchmarks/bench_mixed_pools.py [--gpus 16] [--rate 20] [--gpu-price H200=3.6,H100=2.5]
Plans Llama-3.1-70B at the issue's done-when traffic (isl 2048, osl 256, the rate, TTFT <= 2000 ms,
TPOT <= 40 ms) with the builtin planner, split pools only, on each pairing of prefill and decode GPU type: H200
prefill with H100 decode (--decode-gpu), the reverse, all-H200 and all-H100 (-C disaggregated), each on up to
--gpus GPUs in all. Prices are the bundled list prices unless --gpu-price gives others. Prints one row a pairing:
status, GPUs of each pool, the deployment, TTFT, TPOT, KV transfer, $/h and $ per 1M output tokens.
"""

from __future__ import annotations

import argparse

from shardplan.cli.common import build_request
from shardplan.contracts.plan import Plan
from shardplan.tools.catalogs.prices import parse_gpu_prices
from shardplan.tools.planning.planner import plan

PAIRINGS = (("H200", "H100"), ("H100", "H200"), ("H200", None), ("H100", None))


def pairing_plan(prefill: str, decode: str | None, gpus: int, rate: float, prices: str | None) -> Plan:
    """The plan of one pairing (``decode`` None: one GPU type, split pools asked for)."""
    request = build_request("meta-llama/Llama-3.1-70B", prefill, gpus, isl=2048, osl=256, rate=rate, ttft_ms=2000,
                            tpot_ms=40, decode_gpu=decode, constraint=None if decode else ["disaggregated"])
    given = parse_gpu_prices(prices) if prices else {}
    request = request.model_copy(update={"price": given.get(prefill),
                                         "decode_price": given.get(decode) if decode else None})
    return plan(request)


def row(prefill: str, decode: str | None, p: Plan) -> str:
    name = f"{prefill} prefill + {decode or prefill} decode"
    if p.deployment is None or p.figures is None or p.strategy is None:
        return f"| {name} | {p.status} | - | - | - | - | - | - | - |"
    gpus = {pool.role: pool.workers * pool.gpus_per_worker for pool in p.deployment.pools}
    dollars = p.economics.dollars if p.economics is not None else None
    per_hour = f"${dollars.usd_per_hour:,.2f}" if dollars else "-"
    per_million = f"${dollars.usd_per_million_output_tokens:,.3f}" if dollars else "-"
    return (f"| {name} | {p.status} | {gpus.get('prefill', 0)} + {gpus.get('decode', 0)} | "
            f"`{p.strategy.to_spec()}` | {p.figures.ttft_ms:,.0f} | {p.figures.tpot_ms:.1f} | "
            f"{p.deployment.kv_transfer_ms:.2f} | {per_hour} | {per_million} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--gpu-price", default=None, help="e.g. H200=3.6,H100=2.5 (default: bundled list prices)")
    args = parser.parse_args()
    print("| pools | status | GPUs (prefill + decode) | deployment | TTFT ms | TPOT ms | KV transfer ms | $/h | "
          "$/1M out |")
    print("| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for prefill, decode in PAIRINGS:
        print(row(prefill, decode, pairing_plan(prefill, decode, args.gpus, args.rate, args.gpu_price)), flush=True)


if __name__ == "__main__":
    main()
