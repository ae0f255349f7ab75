"""One phase's node emitter: the helpers every block uses, and the embedding, pipeline hops and head around the
layers (:mod:`.skeleton` walks a phase and assembles each layer from :mod:`.blocks`).

A *unit* is one tensor-parallel group of a stage: attention-DP group ``g`` and sequence shard ``k``.
Per-unit work is one node on the unit's TP ranks; work spanning a stage (MoE dispatch and experts) is
one node on the stage's ranks. :class:`Site` says where a node sits, so that the blocks read as the
layer they describe rather than as argument lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from shardplan.contracts.arithmetic.feasibility import split_layers
from shardplan.contracts.common import DTYPE_BYTES
from shardplan.contracts.model import ModelSpec
from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder import ops
from shardplan.tools.builder.graph import GraphBuffer
from shardplan.tools.builder.ranks import RankLayout

__all__ = ["Site", "Unit", "PhaseBuilder", "decode_context", "verify_tokens"]

Unit = tuple[int, int]
"""(attention-DP group, sequence shard) of a stage."""

_HEAD_OPS = {"final_norm", "final_norm.all_gather", "lm_head", "lm_head.all_gather", "sampler"}


def verify_tokens(workload: Workload) -> int:
    """New positions per sequence in a decode step: 1, or the last token and its K drafts under speculation."""
    return workload.speculation.verify_tokens if workload.speculation else 1


def decode_context(workload: Workload) -> int:
    """KV length of the drawn decode step: the prompt plus half the output (the average step)."""
    return workload.isl + workload.osl // 2


@dataclass(frozen=True)
class Site:
    """Where a node sits: microbatch, layer (None outside the layers), pipeline stage and unit."""

    mb: int
    layer: int | None
    stage: int
    unit: Unit = (0, 0)

    def at(self, unit: Unit) -> Site:
        return replace(self, unit=unit)


class PhaseBuilder:
    """Emits one phase's nodes into a shared graph buffer."""

    def __init__(
        self,
        g: GraphBuffer,
        model: ModelSpec,
        phase_name: str,
        phase: PhaseStrategy,
        layout: RankLayout,
        workload: Workload,
    ) -> None:
        self.g, self.m, self.name, self.s, self.lay, self.w = g, model, phase_name, phase, layout, workload
        self.prefill = phase_name == "prefill"
        self.stages = split_layers(model.num_layers, phase.pp, phase.layer_split)
        self.ab = DTYPE_BYTES[model.activation_dtype]
        self.wb = DTYPE_BYTES[model.weight_dtype]
        # Sequences handled by one attention group in one microbatch (DP replicas share the batch).
        self.seqs = math.ceil(workload.phase_batch(phase_name) / (phase.dp * phase.adp * phase.mb))
        # A decode step verifies each sequence's last token and its drafts under speculative decoding (K + 1).
        self.q_len = math.ceil(workload.isl / phase.sp) if self.prefill else verify_tokens(workload)
        self.unit_tokens = self.seqs * self.q_len
        # Logits at each prompt's last position; a verify step checks every position it carries.
        self.logit_positions = 1 if self.prefill else self.q_len
        self.kv_prefix = ""  # told apart from the target's caches by a drafter's passes
        self.qkv_input = model.hidden_size  # an EAGLE-3 head's layer reads embedding and hidden state (2 h)
        self.kv_len = workload.isl if self.prefill else decode_context(workload)
        self.cached = 0
        if self.prefill and workload.prefill_tokens < workload.isl:
            # A cached prefix: prefill computes only the prompt's uncached rest, which attends to the whole prompt.
            self.cached = workload.isl - workload.prefill_tokens
            self.q_len = math.ceil(workload.prefill_tokens / phase.sp)
            self.unit_tokens = self.seqs * self.q_len
        self.boundary_in = ""
        self.ends: list[str] = []  # what the closing boundary waits for (samplers and KV writes)

    # -- where things are ----------------------------------------------------------------------------
    def units(self) -> list[Unit]:
        return [(g, k) for g in range(self.s.adp) for k in range(self.s.sp)]

    def node_id(self, site: Site, op: str) -> str:
        where = f"L{site.layer}" if site.layer is not None else "head" if op in _HEAD_OPS else "embed"
        g, k = site.unit
        suffix = (f"/g{g}" if self.s.adp > 1 else "") + (f"/s{k}" if self.s.sp > 1 else "")
        return f"{self.name}/mb{site.mb}/{where}/{op}{suffix}"

    def layer_id(self, site: Site, op: str) -> str:
        """Id of a node that spans the stage (not one unit)."""
        return f"{self.name}/mb{site.mb}/L{site.layer}/{op}"

    def placement(self, site: Site, *, per_unit: bool = True) -> dict[str, object]:
        g, k = site.unit
        shard = g * self.s.sp + k if per_unit and self.s.adp * self.s.sp > 1 else None
        return {"phase": self.name, "layer": site.layer, "stage": site.stage, "microbatch": site.mb, "shard": shard}

    def unit_ranks(self, site: Site) -> list[int]:
        return self.lay.unit_ranks(site.stage, *site.unit)

    def shard_tokens(self) -> int:
        """Tokens per rank in the token-sharded residual region (SP with TP splits them over TP ranks)."""
        return math.ceil(self.unit_tokens / self.s.tp) if self.s.sp > 1 else self.unit_tokens

    # -- node makers ---------------------------------------------------------------------------------
    def compute(
        self,
        site: Site,
        op: str,
        kind: str,
        work: ops.Work,
        *,
        parallel: str = "replicated",
        partial: bool = False,
        dtype: str | None = None,
        src: str | None = None,
    ) -> str:
        """A compute node on the unit's TP ranks, fed by ``src`` when given."""
        node = self.g.compute(
            id=self.node_id(site, op),
            name=op,
            kind=kind,
            op=op,
            parallel=parallel,
            partial=partial,
            ranks=self.unit_ranks(site),
            dtype=dtype or self.m.activation_dtype,
            shape=work.shape,
            flops=work.flops,
            bytes_read=work.bytes_read,
            bytes_written=work.bytes_written,
            **self.placement(site),
        )
        return self._fed(node, src)

    def unit_comm(
        self,
        site: Site,
        op: str,
        kind: str,
        purpose: str,
        message_bytes: float,
        *,
        src: str | None = None,
        dtype: str | None = None,
        ranks: list[int] | None = None,
        peers: list[int] | None = None,
    ) -> str:
        """A communication node of one unit (its TP group by default), fed by ``src`` when given."""
        node = self.g.comm(
            id=self.node_id(site, op),
            name=op,
            kind=kind,
            purpose=purpose,
            ranks=ranks if ranks is not None else self.unit_ranks(site),
            peers=peers or [],
            message_bytes=message_bytes,
            dtype=dtype or self.m.activation_dtype,
            **self.placement(site),
        )
        return self._fed(node, src)

    def stage_comm(
        self,
        site: Site,
        op: str,
        kind: str,
        purpose: str,
        message_bytes: float,
        *,
        ranks: list[int],
        dtype: str | None = None,
        shard: int | None = None,
        node_id: str | None = None,
    ) -> str:
        """A communication node that spans more than one unit (SP, attention-DP, expert groups)."""
        return self.g.comm(
            id=node_id or self.layer_id(site, op),
            name=op,
            kind=kind,
            purpose=purpose,
            ranks=ranks,
            peers=[],
            message_bytes=message_bytes,
            dtype=dtype or self.m.activation_dtype,
            **{**self.placement(site, per_unit=False), "shard": shard},
        )

    def _fed(self, node: str, src: str | None) -> str:
        """``node``, with a data edge from ``src`` when one is given."""
        if src is not None:
            self.g.edge(src, node)
        return node

    def tp_reduce(self, site: Site, src: str, op: str, tokens: int, *, purpose: str = "tp_reduce") -> str:
        """The explicit reduction of a row-parallel output (TP-2): all-reduce, or reduce-scatter under SP.

        ``purpose`` is the all-reduce's; a reduce-scatter is always ``sp_reduce_scatter``, which the SP rules check.
        """
        if self.s.tp == 1:
            return src
        under_sp = self.s.sp > 1
        return self.unit_comm(
            site,
            f"{op}.reduce_scatter" if under_sp else f"{op}.all_reduce",
            "reduce_scatter" if under_sp else "all_reduce",
            "sp_reduce_scatter" if under_sp else purpose,
            tokens * self.m.hidden_size * self.ab,
            src=src,
        )

    def sp_regather(self, site: Site, src: str, op: str) -> str:
        """Under SP the residual stream is token-sharded over the TP group; gather it before a GEMM."""
        if self.s.sp == 1 or self.s.tp == 1:
            return src
        return self.unit_comm(
            site, op, "all_gather", "sp_gather", self.unit_tokens * self.m.hidden_size * self.ab, src=src
        )

    def norm(self, site: Site, op: str, src: str) -> str:
        work = ops.memory_op(self.shard_tokens(), self.m.hidden_size, self.ab, flops_per_element=5)
        return self.compute(site, op, "norm", work, src=src)

    # -- the skeleton --------------------------------------------------------------------------------
    def embedding(self, mb: int, after: dict[Unit, str] | None = None) -> dict[Unit, str]:
        """The token embedding of microbatch ``mb`` per unit, each lookup after ``after[unit]`` (a draft pass's: the
        sampler that chose its tokens) or, by default, the phase's step boundary."""
        h, tp = self.m.hidden_size, self.s.tp
        outs = {}
        for unit in self.units():
            site = Site(mb, None, 0, unit)
            size = self.unit_tokens * h * self.ab
            work = ops.Work(0.0, size, size, {"m": self.unit_tokens, "n": h, "vocab": self.m.vocab_size // tp})
            node = self.compute(
                site, "embedding", "embedding", work, parallel="vocab" if tp > 1 else "replicated", partial=tp > 1
            )
            self.g.edge(after[unit] if after is not None else self.boundary_in, node, "sync")
            if tp > 1:
                # A vocabulary-parallel lookup leaves zeros for rows other ranks own: an all-reduce completes it.
                node = self.unit_comm(site, "embedding.all_reduce", "all_reduce", "tp_reduce", size, src=node)
            outs[unit] = node
        return outs

    def pipeline_hop(self, mb: int, layer: int, stage: int, outs: dict[Unit, str]) -> dict[Unit, str]:
        """Send the residual stream of stage ``stage`` to stage ``stage + 1`` (PP-3)."""
        size = self.shard_tokens() * self.m.hidden_size * self.ab
        received = {}
        for unit in self.units():
            here, there = Site(mb, layer, stage, unit), Site(mb, layer, stage + 1, unit)
            src_ranks, dst_ranks = self.unit_ranks(here), self.unit_ranks(there)
            send = self.unit_comm(here, "pp.send", "send", "pp_activation", size, src=outs[unit], peers=dst_ranks)
            recv = self.unit_comm(there, "pp.recv", "recv", "pp_activation", size, peers=src_ranks)
            self.g.edge(send, recv, "pipeline")
            received[unit] = recv
        return received

    def head(self, mb: int, inputs: dict[Unit, str]) -> None:
        m, tp = self.m, self.s.tp
        rows = self.seqs * self.logit_positions
        for unit in self.units():
            if self.prefill and unit[1] != self.s.sp - 1:
                continue  # only the shard holding the last prompt tokens produces logits
            site = Site(mb, None, self.s.pp - 1, unit)
            norm = self.norm(site, "final_norm", inputs[unit])
            src = self.sp_regather(site, norm, "final_norm.all_gather")
            head = self.compute(
                site,
                "lm_head",
                "linear",
                ops.gemm(rows, m.vocab_size // tp, m.hidden_size, DTYPE_BYTES[m.weight_format("lm_head")], self.ab),
                parallel="vocab" if tp > 1 else "replicated",
                dtype=m.weight_format("lm_head"),
                src=src,
            )
            if tp > 1:
                head = self.unit_comm(
                    site,
                    "lm_head.all_gather",
                    "all_gather",
                    "vocab_gather",
                    rows * m.vocab_size * 4.0,
                    dtype="fp32",
                    src=head,
                )
            sampler = self.compute(
                site, "sampler", "sampler", ops.memory_op(rows, m.vocab_size, 4.0, flops_per_element=4), src=head
            )
            self.ends.append(sampler)
