"""The simulator's plain arithmetic: speculative emission with a carry, and which sequences a step keeps."""

from __future__ import annotations

import numpy as np

from shardplan.tools.simulation.blocks import sequences_kept
from shardplan.tools.simulation.emission import Emission


def test_emission_pays_out_exactly_the_mean_over_any_run_of_steps() -> None:
    emission = Emission(emit=1.8)
    gains = [emission.gained(1) for _ in range(10)]
    assert set(gains) <= {1, 2}
    assert sum(gains) == 18
    assert emission.gained(5) == 9


def test_emission_counts_the_steps_to_a_number_of_tokens_from_its_carry() -> None:
    emission = Emission(emit=2.5)
    assert emission.steps_to(10) == 4
    emission.gained(1)  # 2 paid, 0.5 carried
    assert emission.steps_to(3) == 1
    assert Emission().steps_to(7) == 7
    assert Emission().gained(3) == 3


def test_a_step_keeps_the_longest_prefix_of_sequences_whose_blocks_fit() -> None:
    held = np.array([4, 4, 4])
    extra = np.array([1, 1, 1])
    assert sequences_kept(held, extra, free=3) == 3
    # One block short: dropping the last sequence frees its four.
    assert sequences_kept(held, extra, free=2) == 2
    # Nothing free and each needs one: dropping the last frees the four the first two need.
    assert sequences_kept(held, extra, free=0) == 2
    assert sequences_kept(np.array([1]), np.array([5]), free=0) == 0
