"""Whether a plan's deployment still agrees with itself and with its request, for a plan read back from a file.

A plan written by ``shardplan plan`` always agrees; one edited by hand or truncated and mended may not, and the
engine simulator would then replay something other than what the file says (it takes the layout from the
strategy, the sequences in flight from the pools), the launch command would serve another deployment than the
one priced, and the report would draw one. Every command that reads a plan file checks it. Each check below
compares two parts of the file that the planner writes from one decision, so a disagreement is an edit, refused
in one line naming the key and the fix:

* the pools' roles and the strategy: a split strategy has a prefill pool and a decode pool, a colocated one only
  replica pools, and there is at least one pool;
* each pool's layout reads as a strategy spec on its ``gpus_per_worker`` GPUs;
* each pool holds no more sequences than fit its memory (``concurrency_per_worker`` up to
  ``max_concurrency_per_worker``), and the deployment no more than its serving pools hold together, in a feasible
  plan (an infeasible one records the deployment that does not fit, to say why);
* the GPUs: the strategy's and the pools' within the GPU budget, the budget within the request's GPUs.
"""

from __future__ import annotations

from shardplan.contracts.plan import Deployment, Plan
from shardplan.contracts.strategy import Strategy, parse_strategy
from shardplan.errors import InputError
from shardplan.text import counted

__all__ = ["check_deployment"]

_FIX = "use the plan as shardplan plan wrote it, or plan again (shardplan plan ... -o plan.json)"


def check_deployment(plan: Plan) -> Plan:
    """``plan`` when its deployment agrees with its strategy and request (nothing to check when it has none).

    Raises:
        InputError: the first disagreement, its field the key path in the plan file (``deployment.pools[1]``).
    """
    deployment, strategy = plan.deployment, plan.strategy
    if deployment is None or strategy is None:
        return plan
    _check_roles(deployment, strategy)
    for index, pool in enumerate(deployment.pools):
        where = f"deployment.pools[{index}]"
        try:
            layout = parse_strategy(pool.layout)
        except InputError as exc:
            reason = str(exc).removesuffix(f"; {exc.fix}")
            raise InputError(f"{where}.layout does not read as a layout: {reason}", field=f"{where}.layout",
                             fix=_FIX) from None
        if layout.gpus != pool.gpus_per_worker:
            raise InputError(f"{where}: layout {pool.layout} runs on {counted(layout.gpus, 'GPU')}, gpus_per_worker "
                             f"says "
                             f"{pool.gpus_per_worker}", field=f"{where}.gpus_per_worker", fix=_FIX)
        if plan.feasible and pool.concurrency_per_worker > pool.max_concurrency_per_worker:
            raise InputError(f"{where}: concurrency_per_worker={pool.concurrency_per_worker:,} is more than the "
                             f"{counted(pool.max_concurrency_per_worker, 'sequence', spec=',')} that fit a worker",
                             field=f"{where}.concurrency_per_worker", fix=_FIX)
    serving = sum(p.workers * p.max_concurrency_per_worker for p in deployment.pools if p.role != "prefill")
    if plan.feasible and deployment.concurrency > serving:
        raise InputError(f"deployment.concurrency={deployment.concurrency:,} is more than the "
                         f"{counted(serving, 'sequence', spec=',')} "
                         "its pools hold", field="deployment.concurrency", fix=_FIX)
    _check_gpus(plan, deployment, strategy)
    return plan


def _check_roles(deployment: Deployment, strategy: Strategy) -> None:
    roles = [pool.role for pool in deployment.pools]
    expected = {"prefill", "decode"} if strategy.disaggregated else {"replica"}
    if not roles or set(roles) != expected:
        kind = "a split strategy needs a prefill and a decode pool" if strategy.disaggregated else (
            "a colocated strategy runs on replica pools only")
        raise InputError(f"deployment.pools has roles {sorted(set(roles)) or 'none'}: {kind}",
                         field="deployment.pools", fix=_FIX)


def _check_gpus(plan: Plan, deployment: Deployment, strategy: Strategy) -> None:
    request = plan.request
    available = request.gpus + (request.decode_gpus or 0)
    if deployment.gpu_budget > available:
        raise InputError(f"deployment.gpu_budget={deployment.gpu_budget:,} is more than the request's {available:,} "
                         "GPUs", field="deployment.gpu_budget", fix=_FIX)
    pooled = sum(p.workers * p.gpus_per_worker for p in deployment.pools)
    for what, used in (("the strategy", strategy.gpus), ("the pools", pooled)):
        if used > deployment.gpu_budget:
            raise InputError(f"{what} use {counted(used, 'GPU', spec=',')}, more than "
                             f"deployment.gpu_budget={deployment.gpu_budget:,}",
                             field="deployment", fix=_FIX)
