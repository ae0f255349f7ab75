"""Constraints: what a deployment must respect beyond fitting and meeting targets.

People who run models often know things the search cannot: their engine has no pipeline parallelism
set up, tensor parallelism must not leave a node, prefill and decode must share GPUs. A
:class:`Constraints` says so, and the search only considers strategies that respect it.

The text form, one constraint per item (``--constraint`` on the CLI):

* a degree bound: ``tp<=8``, ``pp=1``, ``ep>=8``, ``dp=2``, ``sp=off`` (same as ``sp=1``), optionally for
  one phase: ``decode:tp=8``, ``prefill:sp>=2``;
* placement: ``tp-in-node`` (TP groups inside a node), ``ep-in-node`` (expert groups inside a node),
  ``pp-across-nodes`` (pipeline stages only at node boundaries), ``pow2`` (every degree inside a worker and
  every worker's GPU count a power of two, the space most deployment tools and measured collective tables
  cover);
* serving: ``colocated`` or ``disaggregated``;
* ``gpus-per-replica=8`` (GPUs of one model replica), ``engine=vllm`` (only what the engine can run).

>>> parse_constraints(["tp<=8", "pp=1", "tp-in-node"]).to_texts()
['tp<=8', 'pp=1', 'tp-in-node']
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from shardplan.contracts.common import Contract
from shardplan.errors import InputError

__all__ = [
    "BoundDim",
    "BoundOp",
    "BoundPhase",
    "DegreeBound",
    "Constraints",
    "parse_constraint",
    "parse_constraints",
    "CONSTRAINT_SYNTAX",
]

BoundDim = Literal["dp", "pp", "adp", "sp", "tp", "ep", "mb"]
BoundOp = Literal["=", "<=", ">="]
BoundPhase = Literal["both", "prefill", "decode"]
Serving = Literal["colocated", "disaggregated"]
EngineName = Literal["vllm", "sglang", "trtllm"]

CONSTRAINT_SYNTAX = (
    "write tp<=8, pp=1, ep>=8, sp=off, decode:tp=8, tp-in-node, ep-in-node, pp-across-nodes, pow2, colocated, "
    "disaggregated, gpus-per-replica=8 or engine=vllm"
)
"""The fix shown when a constraint cannot be read."""


class DegreeBound(Contract):
    """One bound on a parallel degree: ``tp<=8`` or ``decode:pp=1``."""

    dim: BoundDim = Field(description="The degree bounded: dp, pp, adp, sp, tp, ep or mb.")
    op: BoundOp = Field(description="'=' fixes the degree, '<=' caps it, '>=' sets a floor.")
    value: int = Field(ge=1, description="The bound.")
    phase: BoundPhase = Field(
        default="both", description="The phase bounded; 'both' means each phase (sp only ever in prefill)."
    )

    def holds(self, degree: int) -> bool:
        """Whether ``degree`` satisfies this bound.

        >>> DegreeBound(dim="tp", op="<=", value=8).holds(16)
        False
        """
        if self.op == "=":
            return degree == self.value
        if self.op == "<=":
            return degree <= self.value
        return degree >= self.value

    def to_text(self) -> str:
        """The constraint's text form, as parsed."""
        where = "" if self.phase == "both" else f"{self.phase}:"
        return f"{where}{self.dim}{self.op}{self.value}"


class Constraints(Contract):
    """Everything a request requires of the deployment beyond memory and targets; empty allows all."""

    degrees: list[DegreeBound] = Field(default_factory=list, description="Bounds on parallel degrees.")
    tp_within_node: bool = Field(default=False, description="Every TP group sits inside one node.")
    ep_within_node: bool = Field(
        default=False, description="Every expert-parallel group (a stage's GPUs in MoE layers) sits inside one node."
    )
    pp_across_nodes: bool = Field(
        default=False, description="Pipeline stages split only at node boundaries (each stage fills whole nodes)."
    )
    powers_of_two: bool = Field(
        default=False,
        description="Every degree inside a worker (pp, adp, sp, tp, ep) and every worker's GPU count is a power of "
        "two; the number of replicas or workers is free.",
    )
    serving: Serving | None = Field(
        default=None, description="colocated (prefill and decode share GPUs) or disaggregated; None allows both."
    )
    gpus_per_replica: int | None = Field(
        default=None, ge=1, description="GPUs of one model replica (pp x adp x sp x tp)."
    )
    engine: EngineName | None = Field(
        default=None, description="Serving engine; only strategies it can run (no SP, no microbatches, one layout)."
    )

    def is_empty(self) -> bool:
        """Whether nothing is constrained."""
        return self == Constraints()

    def to_texts(self) -> list[str]:
        """Each constraint in its text form, in a stable order; parsing them back gives the same Constraints."""
        texts = [bound.to_text() for bound in self.degrees]
        texts += [name for name, on in _FLAG_TEXTS.items() if getattr(self, on)]
        if self.serving:
            texts.append(self.serving)
        if self.gpus_per_replica:
            texts.append(f"gpus-per-replica={self.gpus_per_replica}")
        if self.engine:
            texts.append(f"engine={self.engine}")
        return texts

    def merged(self, other: Constraints) -> Constraints:
        """These constraints with ``other``'s added; where both set a single value, ``other`` wins."""
        degrees = list(self.degrees) + [b for b in other.degrees if b not in self.degrees]
        return Constraints(
            degrees=degrees,
            tp_within_node=self.tp_within_node or other.tp_within_node,
            ep_within_node=self.ep_within_node or other.ep_within_node,
            pp_across_nodes=self.pp_across_nodes or other.pp_across_nodes,
            powers_of_two=self.powers_of_two or other.powers_of_two,
            serving=other.serving or self.serving,
            gpus_per_replica=other.gpus_per_replica or self.gpus_per_replica,
            engine=other.engine or self.engine,
        )


_FLAG_TEXTS = {
    "tp-in-node": "tp_within_node",
    "ep-in-node": "ep_within_node",
    "pp-across-nodes": "pp_across_nodes",
    "pow2": "powers_of_two",
}
_FLAG_SPELLINGS = {
    "tp_within_node": {"tp-in-node", "tp-within-node", "tp-intra-node", "tp=node"},
    "ep_within_node": {"ep-in-node", "ep-within-node", "ep-intra-node", "ep=node"},
    "pp_across_nodes": {"pp-across-nodes", "pp-inter-node", "pp=nodes"},
    "powers_of_two": {"pow2", "power-of-two", "powers-of-two", "pow2-layouts"},
}
_BOUND = re.compile(
    r"^(?:(?P<phase>prefill|decode)\s*[:.]\s*)?(?P<dim>dp|pp|adp|sp|tp|ep|mb)\s*(?P<op><=|>=|==|=)\s*"
    r"(?P<value>\d{1,6}|off|none|no)$"
)


def parse_constraint(text: str) -> Constraints:
    """One constraint in text form as Constraints.

    Raises:
        InputError: the text is not a constraint (``field`` is ``constraint``; the fix shows the syntax).

    >>> parse_constraint("decode:tp<=4").degrees[0].to_text()
    'decode:tp<=4'
    >>> parse_constraint("sp=off").degrees[0].value
    1
    """
    item = re.sub(r"\s+", " ", text.strip().lower()).replace("_", "-")
    compact = item.replace(" ", "")
    for name, spellings in _FLAG_SPELLINGS.items():
        if compact in spellings:
            return Constraints.model_validate({name: True})
    if compact in ("colocated", "co-located", "aggregated"):
        return Constraints(serving="colocated")
    if compact in ("disaggregated", "disagg"):
        return Constraints(serving="disaggregated")
    if match := re.fullmatch(r"(?:gpus-per-replica|replica-gpus|replica)\s*=\s*(\d{1,6})", compact):
        if int(match.group(1)) < 1:
            raise InputError(f"constraint '{text}' asks for 0 GPUs per replica", field="constraint",
                             fix="give at least 1 GPU per replica")
        return Constraints(gpus_per_replica=int(match.group(1)))
    if match := re.fullmatch(r"engine\s*=\s*(vllm|sglang|trtllm|tensorrt-llm)", compact):
        engine = "trtllm" if match.group(1) == "tensorrt-llm" else match.group(1)
        return Constraints.model_validate({"engine": engine})
    match = _BOUND.fullmatch(compact)
    if not match:
        raise InputError(f"cannot read the constraint '{text}'", field="constraint", fix=CONSTRAINT_SYNTAX)
    raw = match.group("value")
    value = 1 if raw in ("off", "none", "no") else int(raw)
    op = "=" if match.group("op") == "==" else match.group("op")
    if value < 1 or (raw in ("off", "none", "no") and op != "="):
        raise InputError(f"constraint '{text}' bounds a degree below 1", field="constraint",
                         fix="degrees are 1 or more; write pp=1 (or pp=off) to turn a dimension off")
    return Constraints(
        degrees=[DegreeBound.model_validate({"dim": match.group("dim"), "op": op, "value": value,
                                             "phase": match.group("phase") or "both"})]
    )


def parse_constraints(texts: list[str] | tuple[str, ...]) -> Constraints:
    """Several constraints in text form, merged (each item may also hold several, comma-separated).

    Raises:
        InputError: an item is not a constraint.

    >>> parse_constraints(["pp=4", "tp=8,tp-in-node"]).to_texts()
    ['pp=4', 'tp=8', 'tp-in-node']
    """
    merged = Constraints()
    for text in texts:
        for item in filter(None, (part.strip() for part in text.split(","))):
            merged = merged.merged(parse_constraint(item))
    return merged
