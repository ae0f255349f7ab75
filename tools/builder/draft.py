"""The drafter's passes in the decode step of a speculative-decoding DAG (knowledge: 10-decode-constraints.md, SPEC-1).

Under speculative decoding the drawn decode step is a verify step: the target's layers carry each sequence's last
token and its K drafts (``q_len = K + 1``, built by :class:`~.phase.PhaseBuilder`), and its sampler accepts some of
them. The drafter then proposes the K drafts step t+1 verifies, in K passes one after another, inside the same step:

* each pass is the drafter's network (:mod:`shardplan.tools.catalogs.drafters`) built by the same blocks as the
  target's layers (attention with its own KV cache read and write, dense or MoE FFN, explicit collectives), on the
  GPUs of the target's last stage, with the target's tensor parallelism and attention groups;
* MTP fuses the token embedding with a hidden state through a replicated projection (``eh_proj``) every pass: the
  target's final hidden state for the first pass, the previous pass's for the next. An EAGLE-3 head fuses three of
  the target's hidden states through its ``fc`` (``3 h -> h``) on the first pass only; every pass's layer then reads
  the embedding beside the hidden state (its QKV projection is ``2 h`` wide) and samples from its own LM head over
  the draft vocabulary (:mod:`shardplan.tools.catalogs.eagle_heads`);
* the first pass runs over the K + 1 verified positions (vLLM V1 drafts from all of them); the others over one
  token per sequence; each pass samples one draft token, which the next pass embeds;
* every pass's sampler and KV writes feed the step t+1 boundary (DEC-1, DEC-5), so nothing of step t+1 overlaps
  them (OVL-1): drafting belongs to the step.

Draft nodes carry ``draft_pass`` and sit outside the target's layers (``layer`` None), so the layer-order rules keep
applying to the target's layers alone.
"""

from __future__ import annotations

from shardplan.contracts.strategy import PhaseStrategy
from shardplan.contracts.workload import Workload
from shardplan.tools.builder import ops
from shardplan.tools.builder.graph import GraphBuffer
from shardplan.tools.builder.phase import PhaseBuilder, Site, Unit
from shardplan.tools.builder.ranks import RankLayout
from shardplan.tools.builder.skeleton import emit_layer
from shardplan.tools.catalogs.drafters import Drafter, drafter_layout

__all__ = ["DraftBuilder", "emit_drafts"]


class DraftBuilder(PhaseBuilder):
    """Emits one draft pass of one decode microbatch: the drafter's network on the target's last stage."""

    def __init__(
        self, g: GraphBuffer, drafter: Drafter, target: PhaseBuilder, workload: Workload, pass_index: int
    ) -> None:
        phase: PhaseStrategy = drafter_layout(target.s, drafter).model_copy(update={"mb": target.s.mb})
        last = target.s.pp - 1
        offset = target.lay.unit_ranks(last, 0, 0)[0]
        super().__init__(g, drafter.network, "decode", phase, RankLayout.of(phase, offset=offset), workload)
        self.drafter, self.pass_index, self.last_stage = drafter, pass_index, last
        # The first pass drafts from every verified position; the later ones from the token just drafted.
        self.q_len = workload.speculation.verify_tokens if workload.speculation and pass_index == 0 else 1
        self.unit_tokens = self.seqs * self.q_len
        self.logit_positions = 1  # one draft token per sequence a pass
        self.kv_prefix = f"draft{pass_index}/"
        self.qkv_input = drafter.qkv_input
        self.boundary_in = target.boundary_in  # the drafter's cache reads wait for the step to open, as the target's

    def node_id(self, site: Site, op: str) -> str:
        return super().node_id(site, op).replace("decode/", f"decode/draft{self.pass_index}/", 1)

    def layer_id(self, site: Site, op: str) -> str:
        return super().layer_id(site, op).replace("decode/", f"decode/draft{self.pass_index}/", 1)

    def placement(self, site: Site, *, per_unit: bool = True) -> dict[str, object]:
        return {**super().placement(site, per_unit=per_unit), "layer": None, "stage": self.last_stage,
                "draft_pass": self.pass_index}

    def draft_inputs(self, mb: int, tokens: dict[Unit, str], hidden: dict[Unit, str]) -> dict[Unit, str]:
        """The embedding of the tokens the previous sampler chose (``tokens``, per unit), fused with the hidden state
        ``hidden`` gives (MTP's ``eh_proj`` every pass, EAGLE-3's ``fc`` on the first; a draft model reads its
        embedding alone). EAGLE-3's later passes read the previous pass's hidden state as it is: it comes out of that
        pass's final norm, before the sampler whose tokens this embedding waits for."""
        h = self.m.hidden_size
        outs = self.embedding(mb, after=tokens)
        if not self.drafter.fuse_width or self.pass_index > 0 and not self.drafter.fuses_every_pass:
            return outs
        for unit, node in outs.items():
            site = Site(mb, None, 0, unit)
            fused = ops.gemm(self.unit_tokens, h, self.drafter.fuse_width, self.wb, self.ab)
            node = self.compute(site, "fuse_proj", "linear", fused, dtype=self.m.weight_dtype, src=node)
            self.g.edge(hidden[unit], node)
            outs[unit] = node
        return outs


def _unit_nodes(b: PhaseBuilder, mb: int, op: str) -> dict[Unit, str]:
    """Per unit, the id of a head node ``op`` (final norm, sampler) of microbatch ``mb`` on the last stage."""
    return {unit: b.node_id(Site(mb, None, b.s.pp - 1, unit), op) for unit in b.units()}


def emit_drafts(g: GraphBuffer, drafter: Drafter, target: PhaseBuilder, workload: Workload) -> list[str]:
    """The K draft passes of every decode microbatch after the target's verify pass; returns what the step t+1
    boundary waits for (each pass's samplers and KV writes)."""
    ends: list[str] = []
    for mb in range(target.s.mb):
        tokens, hidden = _unit_nodes(target, mb, "sampler"), _unit_nodes(target, mb, "final_norm")
        for index in range(drafter.passes):
            b = DraftBuilder(g, drafter, target, workload, index)
            current = b.draft_inputs(mb, tokens, hidden)
            for layer in range(drafter.network.num_layers):
                # A draft model's layers repeat per pass; MTP's K passes take its layers in turn.
                current = emit_layer(b, mb, layer, 0, current)
            b.head(mb, current)
            ends += b.ends
            tokens, hidden = _unit_nodes(b, mb, "sampler"), _unit_nodes(b, mb, "final_norm")
    return ends
