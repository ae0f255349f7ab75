"""Placing global ranks on the parallel grid, like Megatron's rank-group generation.

The grid of one phase, outermost to innermost: ``dp`` replica, ``pp`` stage, ``adp`` attention group,
``sp`` sequence shard, ``tp`` tensor shard. TP is innermost, so a TP group is a run of consecutive
ranks and lands inside one node whenever ``tp`` divides the node size. MoE layers regroup the
``adp x sp x tp`` ranks of a stage as ``ep x etp`` with expert-TP innermost, so PP -> SP -> EP -> TP
nest as the knowledge requires (HIER-1).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.contracts.strategy import PhaseStrategy

__all__ = ["RankLayout"]


@dataclass(frozen=True)
class RankLayout:
    """Rank arithmetic of one phase's grid, starting at global rank ``offset``.

    >>> layout = RankLayout.of(PhaseStrategy(pp=2, tp=4))
    >>> layout.unit_ranks(stage=1, group=0, shard=0)
    [4, 5, 6, 7]
    """

    offset: int
    dp: int
    pp: int
    adp: int
    sp: int
    tp: int
    ep: int

    @classmethod
    def of(cls, phase: PhaseStrategy, offset: int = 0) -> RankLayout:
        return cls(offset, phase.dp, phase.pp, phase.adp, phase.sp, phase.tp, phase.ep)

    @property
    def replica_size(self) -> int:
        return self.pp * self.adp * self.sp * self.tp

    @property
    def stage_size(self) -> int:
        return self.adp * self.sp * self.tp

    @property
    def etp(self) -> int:
        return self.stage_size // self.ep

    def rank(self, stage: int, group: int, shard: int, tp_index: int, replica: int = 0) -> int:
        """Global rank of one grid position."""
        inner = ((stage * self.adp + group) * self.sp + shard) * self.tp + tp_index
        return self.offset + replica * self.replica_size + inner

    def unit_ranks(self, stage: int, group: int, shard: int) -> list[int]:
        """The TP group of attention group ``group``, sequence shard ``shard`` in ``stage``."""
        first = self.rank(stage, group, shard, 0)
        return list(range(first, first + self.tp))

    def stage_ranks(self, stage: int) -> list[int]:
        """Every rank of a pipeline stage."""
        first = self.rank(stage, 0, 0, 0)
        return list(range(first, first + self.stage_size))

    def sp_group_ranks(self, stage: int, group: int) -> list[int]:
        """All ranks of the sequence shards of one attention group (the K/V all-gather spans them)."""
        first = self.rank(stage, group, 0, 0)
        return list(range(first, first + self.sp * self.tp))

    def expert_ranks(self, stage: int, expert_rank: int) -> list[int]:
        """The expert-TP group that holds expert shard ``expert_rank`` of a stage's MoE layers."""
        ranks = self.stage_ranks(stage)
        return ranks[expert_rank * self.etp : (expert_rank + 1) * self.etp]

    def replica_ranks(self, replica: int = 0) -> list[int]:
        """Every rank of one data-parallel replica."""
        first = self.offset + replica * self.replica_size
        return list(range(first, first + self.replica_size))

    def pool(self) -> list[int]:
        """Every rank of the phase, all replicas."""
        return list(range(self.offset, self.offset + self.dp * self.replica_size))
