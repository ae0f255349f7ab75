"""Strategy: the parallel degrees of each phase, and the SPEC text form people type.

Degrees compose without ambiguity (see DESIGN.md): ``dp`` replicas outermost; inside a replica the
attention and dense layers use ``pp x adp x sp x tp`` GPUs; MoE layers regroup the ``adp x sp x tp``
GPUs of a stage as ``ep x etp``; ``mb`` microbatches per step.
"""

from __future__ import annotations

import re

from pydantic import Field

from shardplan.contracts.common import Contract
from shardplan.errors import InputError
from shardplan.packing import place_workers
from shardplan.reading import read_int
from shardplan.text import one_line

__all__ = ["PhaseStrategy", "Strategy", "parse_strategy", "DEGREE_KEYS"]

DEGREE_KEYS = ("dp", "pp", "adp", "sp", "tp", "ep", "mb")


class PhaseStrategy(Contract):
    """Parallel degrees of one phase (prefill or decode)."""

    dp: int = Field(default=1, ge=1, description="Independent model replicas; no communication between them.")
    pp: int = Field(default=1, ge=1, description="Pipeline stages of consecutive layers.")
    adp: int = Field(
        default=1,
        ge=1,
        description="Data-parallel attention groups inside a replica, each attending to its own sequences.",
    )
    sp: int = Field(default=1, ge=1, description="Sequence shards of the prompt (prefill only).")
    tp: int = Field(default=1, ge=1, description="Tensor-parallel shards of every attention and dense operator.")
    ep: int = Field(default=1, ge=1, description="Expert-parallel groups of MoE layers; expert TP is adp*sp*tp/ep.")
    mb: int = Field(default=1, ge=1, description="Microbatches per step.")
    layer_split: list[int] | None = Field(
        default=None, description="Layers per pipeline stage, in order; None for an even split."
    )

    @property
    def gpus(self) -> int:
        """GPUs this phase uses: dp x pp x adp x sp x tp."""
        return self.dp * self.pp * self.adp * self.sp * self.tp

    @property
    def replica_gpus(self) -> int:
        """GPUs of one replica: pp x adp x sp x tp."""
        return self.pp * self.adp * self.sp * self.tp

    @property
    def stage_gpus(self) -> int:
        """GPUs of one pipeline stage: adp x sp x tp (regrouped as ep x etp in MoE layers)."""
        return self.adp * self.sp * self.tp

    @property
    def etp(self) -> int:
        """Expert tensor-parallel degree: the stage's GPUs divided by ep (0 when ep does not divide them)."""
        return self.stage_gpus // self.ep if self.stage_gpus % self.ep == 0 else 0

    def to_spec(self) -> str:
        """The SPEC text of this phase, listing only degrees above 1 (``tp=1`` for the trivial one)."""
        parts = [f"{key}={getattr(self, key)}" for key in DEGREE_KEYS if getattr(self, key) != 1]
        if self.layer_split:
            parts.append("split=" + "/".join(str(n) for n in self.layer_split))
        return ",".join(parts) or "tp=1"

    def active(self) -> list[str]:
        """Names of the parallel dimensions in use (degree above 1), in hierarchy order."""
        return [key for key in ("dp", "pp", "adp", "sp", "ep", "tp") if getattr(self, key) > 1]


class Strategy(Contract):
    """Degrees of both phases, and whether they share GPUs or run on separate pools."""

    prefill: PhaseStrategy = Field(description="Degrees of the prefill phase.")
    decode: PhaseStrategy = Field(description="Degrees of the decode phase (sp must stay 1).")
    disaggregated: bool = Field(
        default=False,
        description="Prefill and decode on separate GPU pools joined by KV transfer; otherwise they share the GPUs.",
    )

    @property
    def gpus(self) -> int:
        """GPUs the whole deployment uses."""
        if self.disaggregated:
            return self.prefill.gpus + self.decode.gpus
        return max(self.prefill.gpus, self.decode.gpus)

    def decode_offset(self, per_node: int | None = None, *, apart: bool = False) -> int:
        """First global rank of the decode pool when the DAG draws it after the prefill pool (0 colocated).

        The pools are placed as deployments place them (:func:`shardplan.packing.place_workers`, prefill
        first): the decode worker follows the prefill worker directly when it fits in what is left of the
        prefill worker's last node (or both fill whole nodes), else it starts on the next node, so that no
        worker's groups straddle a node boundary. ``per_node`` None: no node boundaries. ``apart``: the pools
        run on two GPU types, so the decode worker always starts on a node of its own.

        >>> split = Strategy(prefill=PhaseStrategy(tp=4), decode=PhaseStrategy(tp=8), disaggregated=True)
        >>> split.decode_offset(8), split.decode_offset(16), split.decode_offset()
        (8, 4, 4)
        >>> split.decode_offset(16, apart=True), split.span(16, apart=True)
        (16, 32)
        """
        if not self.disaggregated:
            return 0
        first = self.prefill.gpus
        if not per_node:
            return first
        if apart:
            return -(-first // per_node) * per_node
        room = first + self.decode.gpus + 2 * per_node  # enough whole nodes for any gap
        placed = place_workers([(1, first), (1, self.decode.gpus)], room, per_node)
        # Sizes that do not pack (HIER-2 reports them) are drawn one after the other.
        return placed[1][0] if placed is not None and placed[1][0] >= first else first

    def span(self, per_node: int | None = None, *, apart: bool = False) -> int:
        """GPUs the drawn strategy occupies: a split one from its first prefill rank to its last decode rank
        (see :meth:`decode_offset`; ``apart``: on two GPU types), rounded up to whole nodes once it spans more
        than one.

        >>> split = Strategy(prefill=PhaseStrategy(tp=2), decode=PhaseStrategy(tp=2), disaggregated=True)
        >>> split.span(8), split.span(3), split.span()
        (4, 6, 4)
        """
        if not self.disaggregated:
            return self.gpus
        last = self.decode_offset(per_node, apart=apart) + self.decode.gpus
        return last if not per_node or last <= per_node else -(-last // per_node) * per_node

    def to_spec(self) -> str:
        """The SPEC text: one phase list when both are equal, else ``prefill:...;decode:...``."""
        if self.prefill == self.decode and not self.disaggregated:
            return self.prefill.to_spec()
        text = f"prefill:{self.prefill.to_spec()};decode:{self.decode.to_spec()}"
        return text + (";disagg" if self.disaggregated else "")


_PAIR = re.compile(r"^\s*([a-z_]+)\s*=\s*([0-9/+]+)\s*$")


def _parse_phase(text: str, where: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        match = _PAIR.match(item)
        if not match:
            raise InputError(
                f"cannot read '{item}' in strategy {where}",
                field="strategy",
                fix="write degrees as key=value, e.g. tp=4,pp=2 or prefill:tp=4,sp=2;decode:tp=4,dp=2",
            )
        key, raw = match.groups()
        fix = f"give {key} a whole number of 1 or more"
        if key in ("split", "layers", "layer_split"):
            fix = "give layers per stage as whole numbers, e.g. split=40/40"
            what = f"{key}={one_line(raw, 24)} in strategy {where}".strip()
            values["layer_split"] = [read_int(n, field="strategy", what=what, fix=fix)
                                     for n in re.split(r"[/+]", raw) if n]
            continue
        if key not in DEGREE_KEYS:
            raise InputError(
                f"unknown degree '{key}' in strategy {where}",
                field="strategy",
                fix=f"use one of {', '.join(DEGREE_KEYS)} or split=L1/L2/...",
            )
        shown = f"{key}={one_line(raw, 24)}"
        if not raw.isdigit() or read_int(raw, field="strategy", what=f"{shown} in strategy {where}", fix=fix) < 1:
            raise InputError(f"{shown} in strategy {where} is not a positive integer", field="strategy", fix=fix)
        if key in values:
            raise InputError(f"{key} is given twice in strategy {where}", field="strategy", fix="give each degree once")
        values[key] = read_int(raw, field="strategy", what=shown, fix=fix)
    return values


def _attention_groups_for_ep(values: dict[str, object]) -> None:
    """Give a spec whose ``ep`` exceeds its stage's ``sp*tp`` GPUs the attention groups that make it whole.

    EP regroups the GPUs that attention and dense layers use, so ``ep=2`` alone (or ``pp=2,ep=2``) names
    two GPUs per stage without saying how attention runs on them. The layout that the seeds' EP-alone
    combination describes is attention replicated as data-parallel groups (``adp``): each group attends to
    its own sequences and the MoE layers spread the experts over all of them. Only a spec without ``adp``
    is completed, and only when ``sp*tp`` divides ``ep``; anything else is left for the feasibility checks.
    """
    ep = int(str(values.get("ep", 1)))
    inner = int(str(values.get("sp", 1))) * int(str(values.get("tp", 1)))
    if "adp" not in values and ep > inner and ep % inner == 0:
        values["adp"] = ep // inner


def parse_strategy(spec: str) -> Strategy:
    """Read a SPEC such as ``tp=4,pp=2`` or ``prefill:tp=4,sp=2;decode:tp=4,dp=2;disagg``.

    A spec without phase names applies to both phases, except ``sp``: sequence parallelism exists
    only in prefill, so in decode those GPUs become data-parallel attention groups (``adp``). An ``ep``
    larger than ``sp*tp`` with no ``adp`` given gets the attention-DP groups that fill it (``ep=2`` is
    ``adp=2,ep=2``).

    Raises:
        InputError: the text is not a strategy; the message names the offending part.

    >>> parse_strategy("tp=4,pp=2").decode.tp
    4
    >>> parse_strategy("sp=2,tp=4").decode.adp
    2
    >>> parse_strategy("pp=2,ep=2").prefill.to_spec()
    'pp=2,adp=2,ep=2'
    """
    if not spec or not spec.strip():
        raise InputError("the strategy is empty", field="strategy", fix="give degrees, e.g. tp=4,pp=2")
    disaggregated = False
    phases: dict[str, dict[str, object]] = {}
    plain: dict[str, object] | None = None
    for chunk in filter(None, (part.strip() for part in spec.split(";"))):
        if chunk.lower() in ("disagg", "disaggregated", "disagg=1"):
            disaggregated = True
            continue
        if ":" in chunk:
            name, _, body = chunk.partition(":")
            name = name.strip().lower()
            if name not in ("prefill", "decode"):
                raise InputError(
                    f"unknown phase '{name}' in strategy", field="strategy", fix="name phases prefill: and decode:"
                )
            phases[name] = _parse_phase(body, f"phase {name}")
        else:
            if plain is not None:
                raise InputError(
                    "two unnamed phase lists in strategy",
                    field="strategy",
                    fix="separate phases as prefill:...;decode:...",
                )
            plain = _parse_phase(chunk, "")
    for values in (plain, *phases.values()):
        if values is not None:
            _attention_groups_for_ep(values)
    if plain is not None:
        if phases:
            raise InputError(
                "strategy mixes an unnamed list with named phases",
                field="strategy",
                fix="name both phases: prefill:...;decode:...",
            )
        decode_values = dict(plain)
        sp = int(str(decode_values.pop("sp", 1)))
        if sp > 1:
            decode_values["adp"] = int(str(decode_values.get("adp", 1))) * sp
        phases = {"prefill": plain, "decode": decode_values}
    if set(phases) != {"prefill", "decode"}:
        missing = ({"prefill", "decode"} - set(phases)).pop()
        raise InputError(
            f"strategy names one phase but not {missing}",
            field="strategy",
            fix=f"add {missing}:... or give one unnamed list for both phases",
        )
    return Strategy(
        prefill=PhaseStrategy.model_validate(phases["prefill"]),
        decode=PhaseStrategy.model_validate(phases["decode"]),
        disaggregated=disaggregated,
    )
