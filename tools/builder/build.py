"""Strategy to parallel strategy DAG: every compute, communication and KV-cache step of prefill and of
one decode step.

Shape of the graph (knowledge docs 09-11):

* Two top-level branches, ``prefill`` and ``decode``; one ``step_boundary`` closes prefill, one opens
  decode step t and one opens step t+1. Disaggregated serving puts ``kv_transfer`` nodes between.
* Per microbatch, per pipeline stage, per layer: input norm, QKV projection (column-parallel), K/V
  all-gather under SP, KV-cache write (and read in decode), attention, output projection
  (row-parallel, partial) and its explicit reduction, residual add and post-attention norm on the
  reduced tensor, then a dense FFN or an MoE block (router, dispatch, expert compute per expert rank,
  shared experts, combine). Send/recv joins stages. The last stage runs final norm, vocabulary-parallel
  LM head with its gather, and the sampler.
* A TP operator is one node on its TP group; SP shards and attention-DP groups are separate nodes;
  one data-parallel replica is drawn.
"""

from __future__ import annotations

import math

from ...errors import StrategyError
from ..contracts.common import DTYPE_BYTES
from ..contracts.dag import DAG, DAGMeta
from ..contracts.hardware import Cluster
from ..contracts.model import ModelSpec
from ..contracts.strategy import PhaseStrategy, Strategy
from ..contracts.workload import Workload
from ..feasibility import split_layers, strategy_problems
from ..model_math import kv_width
from . import ops
from .graph import GraphBuffer
from .ranks import RankLayout

__all__ = ["build_dag", "build_phase_sample", "decode_context", "representative_layers"]


def decode_context(workload: Workload) -> int:
    """KV length of the drawn decode step: the prompt plus half the output (the average step)."""
    return workload.isl + workload.osl // 2


class _PhaseBuilder:
    """Emits one phase's nodes into a shared buffer."""

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
        # Sequences handled by one attention group in one microbatch (DP replicas share the batch).
        self.seqs = math.ceil(workload.batch / (phase.dp * phase.adp * phase.mb))
        self.q_len = math.ceil(workload.isl / phase.sp) if self.prefill else 1
        self.unit_tokens = self.seqs * self.q_len
        self.kv_len = workload.isl if self.prefill else decode_context(workload)
        self.boundary_in: str = ""
        self.ends: list[str] = []  # what the closing boundary waits for (samplers and KV writes)

    # -- naming -------------------------------------------------------------------------------------
    def _id(self, mb: int, layer: int | None, op: str, group: int = 0, shard: int = 0) -> str:
        where = f"L{layer}" if layer is not None else "head" if op in _HEAD_OPS else "embed"
        suffix = (f"/g{group}" if self.s.adp > 1 else "") + (f"/s{shard}" if self.s.sp > 1 else "")
        return f"{self.name}/mb{mb}/{where}/{op}{suffix}"

    def _units(self) -> list[tuple[int, int]]:
        return [(g, k) for g in range(self.s.adp) for k in range(self.s.sp)]

    def _common(self, mb: int, layer: int | None, stage: int, group: int, shard: int) -> dict[str, object]:
        units = self.s.adp * self.s.sp
        return {
            "phase": self.name,
            "layer": layer,
            "stage": stage,
            "microbatch": mb,
            "shard": (group * self.s.sp + shard) if units > 1 else None,
        }

    def _compute(
        self,
        mb: int,
        layer: int | None,
        stage: int,
        unit: tuple[int, int],
        op: str,
        kind: str,
        work: ops.Work,
        parallel: str = "replicated",
        partial: bool = False,
        dtype: str | None = None,
        ranks: list[int] | None = None,
    ) -> str:
        g, k = unit
        return self.g.compute(
            id=self._id(mb, layer, op, g, k),
            name=op,
            kind=kind,
            op=op,
            parallel=parallel,
            partial=partial,
            ranks=ranks if ranks is not None else self.lay.unit_ranks(stage, g, k),
            dtype=dtype or self.m.activation_dtype,
            shape=work.shape,
            flops=work.flops,
            bytes_read=work.bytes_read,
            bytes_written=work.bytes_written,
            **self._common(mb, layer, stage, g, k),
        )

    def _tp_reduce(self, mb: int, layer: int, stage: int, unit: tuple[int, int], src: str, op: str, tokens: int) -> str:
        """The explicit reduction of a row-parallel output (TP-2): all-reduce, or reduce-scatter under SP."""
        if self.s.tp == 1:
            return src
        g, k = unit
        kind = "reduce_scatter" if self.s.sp > 1 else "all_reduce"
        node = self.g.comm(
            id=self._id(mb, layer, op, g, k),
            name=op,
            kind=kind,
            purpose="sp_reduce_scatter" if self.s.sp > 1 else "tp_reduce",
            ranks=self.lay.unit_ranks(stage, g, k),
            message_bytes=tokens * self.m.hidden_size * self.ab,
            dtype=self.m.activation_dtype,
            **self._common(mb, layer, stage, g, k),
        )
        self.g.edge(src, node)
        return node

    def _sp_regather(self, mb: int, layer: int, stage: int, unit: tuple[int, int], src: str, op: str) -> str:
        """Under SP the residual stream is token-sharded over the TP group; gather it before a GEMM."""
        if self.s.sp == 1 or self.s.tp == 1:
            return src
        g, k = unit
        node = self.g.comm(
            id=self._id(mb, layer, op, g, k),
            name=op,
            kind="all_gather",
            purpose="sp_gather",
            ranks=self.lay.unit_ranks(stage, g, k),
            message_bytes=self.unit_tokens * self.m.hidden_size * self.ab,
            dtype=self.m.activation_dtype,
            **self._common(mb, layer, stage, g, k),
        )
        self.g.edge(src, node)
        return node

    def _shard_tokens(self) -> int:
        """Tokens per rank in the token-sharded residual region (SP with TP splits them over TP ranks)."""
        return math.ceil(self.unit_tokens / self.s.tp) if self.s.sp > 1 else self.unit_tokens

    # -- building blocks ------------------------------------------------------------------------------
    def embedding(self, mb: int) -> dict[tuple[int, int], str]:
        outs = {}
        h, tp = self.m.hidden_size, self.s.tp
        for unit in self._units():
            work = ops.Work(
                0.0,
                self.unit_tokens * h * self.ab,
                self.unit_tokens * h * self.ab,
                {"m": self.unit_tokens, "n": h, "vocab": self.m.vocab_size // tp},
            )
            node = self._compute(
                mb,
                None,
                0,
                unit,
                "embedding",
                "embedding",
                work,
                parallel="vocab" if tp > 1 else "replicated",
                partial=tp > 1,
            )
            self.g.edge(self.boundary_in, node, "sync")
            if tp > 1:
                # A vocabulary-parallel lookup leaves zeros for rows other ranks own: an all-reduce completes it.
                node = self._tp_reduce_named(mb, unit, node)
            outs[unit] = node
        return outs

    def _tp_reduce_named(self, mb: int, unit: tuple[int, int], src: str) -> str:
        g, k = unit
        node = self.g.comm(
            id=self._id(mb, None, "embedding.all_reduce", g, k),
            name="embedding.all_reduce",
            kind="all_reduce",
            purpose="tp_reduce",
            ranks=self.lay.unit_ranks(0, g, k),
            message_bytes=self.unit_tokens * self.m.hidden_size * self.ab,
            dtype=self.m.activation_dtype,
            **self._common(mb, None, 0, g, k),
        )
        self.g.edge(src, node)
        return node

    def attention_block(
        self, mb: int, layer: int, stage: int, inputs: dict[tuple[int, int], str]
    ) -> dict[tuple[int, int], tuple[str, str]]:
        """Attention of one layer per unit; returns each unit's (residual add, post-attention norm) ids."""
        m, s = self.m, self.s
        h, tp = m.hidden_size, s.tp
        kvw = kv_width(m) * DTYPE_BYTES[m.kv_dtype]
        kv_heads_per_rank = 1 if m.mla is not None else max(1, m.num_kv_heads // tp)
        kv_rank_bytes = kvw if m.mla is not None else kvw * kv_heads_per_rank / m.num_kv_heads
        qkv: dict[tuple[int, int], str] = {}
        for unit in self._units():
            norm = self._compute(
                mb,
                layer,
                stage,
                unit,
                "input_norm",
                "norm",
                ops.memory_op(self._shard_tokens(), h, self.ab, flops_per_element=5),
            )
            self.g.edge(inputs[unit], norm)
            gathered = self._sp_regather(mb, layer, stage, unit, norm, "input_norm.all_gather")
            proj = self._compute(
                mb,
                layer,
                stage,
                unit,
                "qkv_proj",
                "linear",
                ops.qkv_projection(m, self.unit_tokens, tp),
                parallel="column",
                dtype=m.weight_dtype,
            )
            self.g.edge(gathered, proj)
            qkv[unit] = proj
        # Under SP every shard needs the K/V of the whole prompt: one explicit all-gather per attention group.
        kv_gather: dict[int, str] = {}
        if s.sp > 1:
            for group in range(s.adp):
                node = self.g.comm(
                    id=self._id(mb, layer, "kv.all_gather", group, 0).replace("/s0", ""),
                    name="kv.all_gather",
                    kind="all_gather",
                    purpose="sp_kv_gather",
                    ranks=self.lay.sp_group_ranks(stage, group),
                    message_bytes=self.seqs * self.w.isl * kv_rank_bytes,
                    dtype=m.kv_dtype,
                    phase=self.name,
                    layer=layer,
                    stage=stage,
                    microbatch=mb,
                    shard=None,
                )
                self.g.edges_from([qkv[(group, k)] for k in range(s.sp)], node)
                kv_gather[group] = node
        outs: dict[tuple[int, int], tuple[str, str]] = {}
        for unit in self._units():
            g, k = unit
            kv_state = f"kv/L{layer}/mb{mb}" + (f"/g{g}" if s.adp > 1 else "") + (f"/s{k}" if s.sp > 1 else "")
            write_tokens = self.q_len
            write = self.g.state(
                id=self._id(mb, layer, "kv_write", g, k),
                name="kv_write",
                kind="kv_write",
                kv_state=kv_state,
                tokens=write_tokens,
                bytes=self.seqs * write_tokens * kv_rank_bytes,
                ranks=self.lay.unit_ranks(stage, g, k),
                **self._common(mb, layer, stage, g, k),
            )
            self.g.edge(qkv[unit], write, "state")
            self.ends.append(write)
            attn_work = ops.attention(m, layer, self.seqs, self.q_len, self.kv_len, tp, prefill=self.prefill)
            attn = self._compute(mb, layer, stage, unit, "attention", "attention", attn_work, parallel="column")
            self.g.edge(qkv[unit], attn)
            if s.sp > 1:
                self.g.edge(kv_gather[g], attn)
            if not self.prefill:
                read = self.g.state(
                    id=self._id(mb, layer, "kv_read", g, k),
                    name="kv_read",
                    kind="kv_read",
                    kv_state=kv_state,
                    tokens=attn_work.shape["kv_len"],
                    bytes=self.seqs * attn_work.shape["kv_len"] * kv_rank_bytes,
                    ranks=self.lay.unit_ranks(stage, g, k),
                    **self._common(mb, layer, stage, g, k),
                )
                self.g.edge(self.boundary_in, read, "sync")
                self.g.edge(read, attn, "state")
                self.g.edge(write, attn, "state")
            v_width = m.mla.v_head_dim if m.mla else m.head_dim
            o_proj = self._compute(
                mb,
                layer,
                stage,
                unit,
                "o_proj",
                "linear",
                ops.gemm(
                    self.unit_tokens, h, m.num_attention_heads * v_width // tp, DTYPE_BYTES[m.weight_dtype], self.ab
                ),
                parallel="row",
                partial=tp > 1,
                dtype=m.weight_dtype,
            )
            self.g.edge(attn, o_proj)
            reduced = self._tp_reduce(
                mb,
                layer,
                stage,
                unit,
                o_proj,
                "o_proj.all_reduce" if s.sp == 1 else "o_proj.reduce_scatter",
                self.unit_tokens,
            )
            add = self._compute(
                mb,
                layer,
                stage,
                unit,
                "attn.residual_add",
                "elementwise",
                ops.memory_op(self._shard_tokens(), h, self.ab, reads=2),
            )
            self.g.edge(reduced, add)
            self.g.edge(inputs[unit], add)
            norm = self._compute(
                mb,
                layer,
                stage,
                unit,
                "post_attn_norm",
                "norm",
                ops.memory_op(self._shard_tokens(), h, self.ab, flops_per_element=5),
            )
            self.g.edge(add, norm)
            outs[unit] = (add, norm)
        return outs

    def dense_ffn(self, mb: int, layer: int, stage: int, unit: tuple[int, int], norm: str) -> str:
        m, tp = self.m, self.s.tp
        wb = DTYPE_BYTES[m.weight_dtype]
        gathered = self._sp_regather(mb, layer, stage, unit, norm, "post_attn_norm.all_gather")
        width = m.intermediate_size // tp
        up = self._compute(
            mb,
            layer,
            stage,
            unit,
            "gate_up_proj",
            "linear",
            ops.gemm(self.unit_tokens, (2 if m.gated_mlp else 1) * width, m.hidden_size, wb, self.ab),
            parallel="column",
            dtype=m.weight_dtype,
        )
        self.g.edge(gathered, up)
        down = self._compute(
            mb,
            layer,
            stage,
            unit,
            "down_proj",
            "linear",
            ops.gemm(self.unit_tokens, m.hidden_size, width, wb, self.ab),
            parallel="row",
            partial=tp > 1,
            dtype=m.weight_dtype,
        )
        self.g.edge(up, down)
        return self._tp_reduce(
            mb,
            layer,
            stage,
            unit,
            down,
            "down_proj.all_reduce" if self.s.sp == 1 else "down_proj.reduce_scatter",
            self.unit_tokens,
        )

    def moe_ffn(
        self, mb: int, layer: int, stage: int, norms: dict[tuple[int, int], str]
    ) -> dict[tuple[int, int], list[str]]:
        """Router, dispatch, expert compute per expert rank, shared experts, combine (EP-1)."""
        m, s = self.m, self.s
        moe = m.moe
        assert moe is not None
        h, tp, ep, etp = m.hidden_size, s.tp, s.ep, s.stage_gpus // s.ep
        stage_tokens = self.unit_tokens * s.adp * s.sp
        multi_unit = s.adp * s.sp > 1
        routers: dict[tuple[int, int], str] = {}
        for unit in self._units():
            gathered = self._sp_regather(mb, layer, stage, unit, norms[unit], "post_attn_norm.all_gather")
            router = self._compute(
                mb,
                layer,
                stage,
                unit,
                "router",
                "router",
                ops.gemm(self.unit_tokens, moe.num_experts, h, DTYPE_BYTES[m.weight_dtype], self.ab),
            )
            self.g.edge(gathered, router)
            routers[unit] = router
        common = {"phase": self.name, "layer": layer, "stage": stage, "microbatch": mb, "shard": None}
        stage_ranks = self.lay.stage_ranks(stage)
        base = f"{self.name}/mb{mb}/L{layer}"
        if ep > 1:
            # Each TP rank of a unit dispatches its 1/tp share of the unit's tokens, top-k copies each.
            sent = self.unit_tokens / tp * moe.experts_per_token * h * self.ab
            entry = self.g.comm(
                id=f"{base}/moe.dispatch",
                name="moe.dispatch",
                kind="all_to_all",
                purpose="ep_dispatch",
                ranks=stage_ranks,
                message_bytes=sent,
                dtype=m.activation_dtype,
                **common,
            )
        elif multi_unit:
            entry = self.g.comm(
                id=f"{base}/moe.all_gather",
                name="moe.all_gather",
                kind="all_gather",
                purpose="adp_gather",
                ranks=stage_ranks,
                message_bytes=stage_tokens * h * self.ab,
                dtype=m.activation_dtype,
                **common,
            )
        else:
            entry = ""
        if entry:
            self.g.edges_from(list(routers.values()), entry)
        local_experts = moe.num_experts // ep
        routed_pairs = stage_tokens * moe.experts_per_token / ep
        expert_outs = []
        for rank_group in range(ep):
            work = ops.expert_ffn(m, stage_tokens, local_experts, ep, etp)
            ranks = self.lay.expert_ranks(stage, rank_group)
            node = self.g.compute(
                id=f"{base}/experts" + (f"/e{rank_group}" if ep > 1 else ""),
                name="experts",
                kind="expert",
                op="routed_experts",
                parallel="expert" if ep > 1 else "column",
                partial=etp > 1,
                ranks=ranks,
                dtype=m.expert_dtype or m.weight_dtype,
                shape=work.shape,
                flops=work.flops,
                bytes_read=work.bytes_read,
                bytes_written=work.bytes_written,
                **{**common, "shard": rank_group if ep > 1 else None},
            )
            if entry:
                self.g.edge(entry, node)
            else:
                self.g.edges_from(list(routers.values()), node)
            out = node
            if etp > 1 and (ep > 1 or not multi_unit):
                out = self.g.comm(
                    id=f"{base}/experts.all_reduce" + (f"/e{rank_group}" if ep > 1 else ""),
                    name="experts.all_reduce",
                    kind="all_reduce",
                    purpose="tp_reduce",
                    ranks=ranks,
                    message_bytes=routed_pairs * h * self.ab,
                    dtype=m.activation_dtype,
                    **{**common, "shard": rank_group if ep > 1 else None},
                )
                self.g.edge(node, out)
            expert_outs.append(out)
        if ep > 1:
            exit_node = self.g.comm(
                id=f"{base}/moe.combine",
                name="moe.combine",
                kind="all_to_all",
                purpose="ep_combine",
                ranks=stage_ranks,
                message_bytes=self.unit_tokens / tp * moe.experts_per_token * h * self.ab,
                dtype=m.activation_dtype,
                **common,
            )
        elif multi_unit:
            exit_node = self.g.comm(
                id=f"{base}/moe.reduce_scatter",
                name="moe.reduce_scatter",
                kind="reduce_scatter",
                purpose="adp_scatter",
                ranks=stage_ranks,
                message_bytes=stage_tokens * h * self.ab,
                dtype=m.activation_dtype,
                **common,
            )
        else:
            exit_node = ""
        if exit_node:
            self.g.edges_from(expert_outs, exit_node)
        outs: dict[tuple[int, int], list[str]] = {}
        for unit in self._units():
            parts = [exit_node] if exit_node else list(expert_outs)
            if moe.num_shared_experts:
                width = moe.num_shared_experts * moe.shared_expert_intermediate_size // tp
                shared_work = ops.gemm(self.unit_tokens, 3 * width, h, DTYPE_BYTES[m.weight_dtype], self.ab)
                shared = self._compute(
                    mb,
                    layer,
                    stage,
                    unit,
                    "shared_experts",
                    "expert",
                    shared_work,
                    parallel="column",
                    partial=tp > 1,
                    dtype=m.weight_dtype,
                )
                self.g.edge(routers[unit], shared, "sync")
                self.g.edge(
                    norms[unit]
                    if self.s.sp == 1 or tp == 1
                    else self._id(mb, layer, "post_attn_norm.all_gather", *unit),
                    shared,
                )
                parts.append(
                    self._tp_reduce(
                        mb,
                        layer,
                        stage,
                        unit,
                        shared,
                        "shared_experts.all_reduce" if self.s.sp == 1 else "shared_experts.reduce_scatter",
                        self.unit_tokens,
                    )
                )
            outs[unit] = parts
        return outs

    def layer(self, mb: int, layer: int, stage: int, inputs: dict[tuple[int, int], str]) -> dict[tuple[int, int], str]:
        attn = self.attention_block(mb, layer, stage, inputs)
        h = self.m.hidden_size
        ffn_parts: dict[tuple[int, int], list[str]]
        if self.m.is_moe_layer(layer):
            ffn_parts = self.moe_ffn(mb, layer, stage, {u: attn[u][1] for u in self._units()})
        else:
            ffn_parts = {u: [self.dense_ffn(mb, layer, stage, u, attn[u][1])] for u in self._units()}
        outs = {}
        for unit in self._units():
            add = self._compute(
                mb,
                layer,
                stage,
                unit,
                "ffn.residual_add",
                "elementwise",
                ops.memory_op(self._shard_tokens(), h, self.ab, reads=1 + len(ffn_parts[unit])),
            )
            self.g.edges_from(ffn_parts[unit], add)
            self.g.edge(attn[unit][0], add)
            outs[unit] = add
        return outs

    def pipeline_hop(
        self, mb: int, layer: int, stage: int, outs: dict[tuple[int, int], str]
    ) -> dict[tuple[int, int], str]:
        """Send the residual stream of stage ``stage`` to stage ``stage + 1`` (PP-3)."""
        received = {}
        tokens = self._shard_tokens()
        for unit in self._units():
            g, k = unit
            src_ranks, dst_ranks = self.lay.unit_ranks(stage, g, k), self.lay.unit_ranks(stage + 1, g, k)
            size = tokens * self.m.hidden_size * self.ab
            send = self.g.comm(
                id=self._id(mb, layer, "pp.send", g, k),
                name="pp.send",
                kind="send",
                purpose="pp_activation",
                ranks=src_ranks,
                peers=dst_ranks,
                message_bytes=size,
                dtype=self.m.activation_dtype,
                **self._common(mb, layer, stage, g, k),
            )
            recv = self.g.comm(
                id=self._id(mb, layer, "pp.recv", g, k),
                name="pp.recv",
                kind="recv",
                purpose="pp_activation",
                ranks=dst_ranks,
                peers=src_ranks,
                message_bytes=size,
                dtype=self.m.activation_dtype,
                **self._common(mb, layer, stage + 1, g, k),
            )
            self.g.edge(outs[unit], send)
            self.g.edge(send, recv, "pipeline")
            received[unit] = recv
        return received

    def head(self, mb: int, inputs: dict[tuple[int, int], str]) -> None:
        m, tp = self.m, self.s.tp
        last = self.s.pp - 1
        rows = self.seqs  # logits only for the last position of each sequence
        for unit in self._units():
            g, k = unit
            if self.prefill and k != self.s.sp - 1:
                continue  # only the shard holding the last prompt tokens produces logits
            norm = self._compute(
                mb,
                None,
                last,
                unit,
                "final_norm",
                "norm",
                ops.memory_op(self._shard_tokens(), m.hidden_size, self.ab, flops_per_element=5),
            )
            self.g.edge(inputs[unit], norm)
            src = self._sp_regather(mb, None, last, unit, norm, "final_norm.all_gather")  # type: ignore[arg-type]
            head = self._compute(
                mb,
                None,
                last,
                unit,
                "lm_head",
                "linear",
                ops.gemm(rows, m.vocab_size // tp, m.hidden_size, DTYPE_BYTES[m.weight_dtype], self.ab),
                parallel="vocab" if tp > 1 else "replicated",
                dtype=m.weight_dtype,
            )
            self.g.edge(src, head)
            if tp > 1:
                gather = self.g.comm(
                    id=self._id(mb, None, "lm_head.all_gather", g, k),
                    name="lm_head.all_gather",
                    kind="all_gather",
                    purpose="vocab_gather",
                    ranks=self.lay.unit_ranks(last, g, k),
                    message_bytes=rows * m.vocab_size * 4.0,
                    dtype="fp32",
                    **self._common(mb, None, last, g, k),
                )
                self.g.edge(head, gather)
                head = gather
            sampler = self._compute(
                mb, None, last, unit, "sampler", "sampler", ops.memory_op(rows, m.vocab_size, 4.0, flops_per_element=4)
            )
            self.g.edge(head, sampler)
            self.ends.append(sampler)

    def build(self, boundary_in: str, *, microbatches: int | None = None, only_layers: set[int] | None = None) -> None:
        """Emit the phase. ``microbatches`` and ``only_layers`` restrict it to a sample, for fast estimates."""
        self.boundary_in = boundary_in
        for mb in range(self.s.mb if microbatches is None else microbatches):
            current = self.embedding(mb)
            for stage, layers in enumerate(self.stages):
                for layer in layers:
                    if only_layers is None or layer in only_layers:
                        current = self.layer(mb, layer, stage, current)
                if stage + 1 < len(self.stages):
                    current = self.pipeline_hop(mb, layers[-1], stage, current)
            self.head(mb, current)


_HEAD_OPS = {"final_norm", "final_norm.all_gather", "lm_head", "lm_head.all_gather", "sampler"}


def build_dag(model: ModelSpec, cluster: Cluster, strategy: Strategy, workload: Workload) -> DAG:
    """The parallel strategy DAG of ``strategy`` for ``model`` on ``cluster`` serving ``workload``.

    Raises:
        StrategyError: the strategy cannot be built (a degree that does not divide, SP in decode, EP on a
            dense model, degrees whose product is not the GPU count); the message gives every reason
            with its rule ID.
    """
    problems = strategy_problems(model, strategy, workload, cluster.world_size)
    if problems:
        reasons = "; ".join(f"{p.message} [{p.rule}]" for p in problems)
        raise StrategyError(
            f"strategy {strategy.to_spec()} cannot be built: {reasons}", field="strategy", fix=problems[0].fix
        )
    g = GraphBuffer(cluster)
    prefill_layout = RankLayout.of(strategy.prefill)
    decode_layout = RankLayout.of(strategy.decode, offset=strategy.prefill.gpus if strategy.disaggregated else 0)

    prefill_start = g.state(
        id="prefill/start",
        name="prefill start",
        kind="step_boundary",
        phase="prefill",
        boundary="step_start",
        ranks=prefill_layout.replica_ranks(),
    )
    prefill = _PhaseBuilder(g, model, "prefill", strategy.prefill, prefill_layout, workload)
    prefill.build(prefill_start)
    prefill_end = g.state(
        id="prefill/end",
        name="prefill end",
        kind="step_boundary",
        phase="prefill",
        boundary="step_end",
        stage=strategy.prefill.pp - 1,
        ranks=prefill_layout.replica_ranks(),
    )
    g.edges_from([n for n in prefill.ends if "/kv_write" in n], prefill_end, "state")
    g.edges_from([n for n in prefill.ends if "/kv_write" not in n], prefill_end, "sync")

    decode_start = g.state(
        id="decode/step_t",
        name="decode step t",
        kind="step_boundary",
        phase="decode",
        boundary="step_start",
        ranks=decode_layout.replica_ranks(),
    )
    if strategy.disaggregated:
        _kv_handoff(g, model, strategy, workload, prefill_layout, decode_layout, prefill_end, decode_start)
    else:
        g.edge(prefill_end, decode_start, "sync")
    decode = _PhaseBuilder(g, model, "decode", strategy.decode, decode_layout, workload)
    decode.build(decode_start)
    next_step = g.state(
        id="decode/step_t+1",
        name="decode step t+1",
        kind="step_boundary",
        phase="decode",
        boundary="step_end",
        step=1,
        stage=strategy.decode.pp - 1,
        ranks=decode_layout.replica_ranks(),
    )
    g.edges_from([n for n in decode.ends if "/kv_write" in n], next_step, "state")
    g.edges_from([n for n in decode.ends if "/kv_write" not in n], next_step, "sync")

    meta = DAGMeta(
        model=model,
        gpu=cluster.gpu.name,
        gpus=cluster.world_size,
        gpus_per_node=cluster.gpus_per_node,
        cluster=cluster,
        strategy=strategy,
        workload=workload,
        stage_layers={"prefill": prefill.stages, "decode": decode.stages},
        rank_pools={"prefill": prefill_layout.replica_ranks(), "decode": decode_layout.replica_ranks()},
    )
    return DAG.model_construct(schema_version="1", meta=meta, nodes=g.nodes, edges=g.edges)


def _kv_handoff(
    g: GraphBuffer,
    model: ModelSpec,
    strategy: Strategy,
    workload: Workload,
    prefill: RankLayout,
    decode: RankLayout,
    prefill_end: str,
    decode_start: str,
) -> None:
    """Disaggregated serving: each decode stage receives the KV cache of its layers from the prefill pool (KV-2)."""
    per_token_layer = kv_width(model) * DTYPE_BYTES[model.kv_dtype]
    prefill_stages = split_layers(model.num_layers, strategy.prefill.pp, strategy.prefill.layer_split)
    batch_per_replica = math.ceil(workload.batch / strategy.decode.dp)
    for stage, layers in enumerate(split_layers(model.num_layers, strategy.decode.pp, strategy.decode.layer_split)):
        sources = sorted(
            {r for s, held in enumerate(prefill_stages) if set(held) & set(layers) for r in prefill.stage_ranks(s)}
        )
        dst = decode.stage_ranks(stage)
        size = batch_per_replica * workload.isl * per_token_layer * len(layers) / len(dst)
        node = g.comm(
            id=f"handoff/kv_transfer/stage{stage}",
            name="kv_transfer",
            kind="kv_transfer",
            purpose="kv_transfer",
            phase="handoff",
            stage=stage,
            ranks=sources,
            peers=dst,
            message_bytes=size,
            dtype=model.kv_dtype,
        )
        g.edge(prefill_end, node, "state")
        g.edge(node, decode_start, "state")


def representative_layers(model: ModelSpec, stage_layers: list[list[int]]) -> dict[int, int]:
    """One layer per (stage, FFN kind, attention kind), mapped to how many layers of its stage it stands for."""
    picks: dict[int, int] = {}
    for layers in stage_layers:
        first_of: dict[tuple[bool, str], int] = {}
        for layer in layers:
            key = (model.is_moe_layer(layer), model.layer_types[layer])
            if key not in first_of:
                first_of[key] = layer
                picks[layer] = 0
            picks[first_of[key]] += 1
    return picks


def build_phase_sample(
    model: ModelSpec, cluster: Cluster, phase_name: str, phase: PhaseStrategy, workload: Workload
) -> tuple[GraphBuffer, dict[int, int], list[list[int]]]:
    """One microbatch of one phase with only representative layers, for the search's fast estimate.

    Returns the graph, the representative layers with their multiplicities, and the stage split.
    """
    g = GraphBuffer(cluster)
    layout = RankLayout.of(phase)
    start = g.state(
        id=f"{phase_name}/sample_start",
        name="start",
        kind="step_boundary",
        phase=phase_name,
        boundary="step_start",
        ranks=layout.replica_ranks(),
    )
    builder = _PhaseBuilder(g, model, phase_name, phase, layout, workload)
    picks = representative_layers(model, builder.stages)
    builder.build(start, microbatches=1, only_layers=set(picks))
    return g, picks, builder.stages
