"""The planning state's reducers are pure functions: tested directly, without a graph."""

from __future__ import annotations

from shardplan.agent.state import append_items, keep_best, merge_rules, proposal_rank


def _proposal(turn: int, valid: bool = True, fits: bool = True, meets: bool = True, score: list[float] | None = None,
              name: str = "x") -> dict:
    return {"turn": turn, "strategy": name, "valid": valid, "meets_targets": meets, "figures": {"fits": fits},
            "score": score if score is not None else [0.0, 10.0]}


def test_merge_rules_keeps_order_and_drops_duplicates() -> None:
    left = [{"id": "DEC-1", "text": "a"}, {"id": "TP-2", "text": "b"}]
    right = [{"id": "TP-2", "text": "other"}, {"id": "SP-1", "text": "c"}, {"id": "SP-1", "text": "d"}]
    merged = merge_rules(left, right)
    assert [r["id"] for r in merged] == ["DEC-1", "TP-2", "SP-1"]
    assert merged[1]["text"] == "b"  # the first retrieval of a rule wins
    assert merge_rules(None, right) == [right[0], right[1]]
    assert merge_rules(left, None) == left
    assert left == [{"id": "DEC-1", "text": "a"}, {"id": "TP-2", "text": "b"}]  # inputs are not mutated


def test_append_items_accepts_one_record_or_a_list() -> None:
    assert append_items([{"a": 1}], {"a": 2}) == [{"a": 1}, {"a": 2}]
    assert append_items([{"a": 1}], [{"a": 2}, {"a": 3}]) == [{"a": 1}, {"a": 2}, {"a": 3}]
    assert append_items(None, None) == []
    assert append_items([{"a": 1}], None) == [{"a": 1}]
    assert append_items([{"a": 1}], [{"a": 1}]) == [{"a": 1}, {"a": 1}]  # appends, never deduplicates


def test_proposal_rank_orders_valid_then_fitting_then_on_target_then_score() -> None:
    invalid = _proposal(1, valid=False, score=[0.0, 1.0])
    overflowing = _proposal(1, fits=False, score=[0.0, 1.0])
    missing = _proposal(1, meets=False, score=[0.0, 1.0])
    slow = _proposal(1, score=[0.0, 50.0])
    fast = _proposal(1, score=[0.0, 5.0])
    ordered = sorted([invalid, overflowing, missing, slow, fast], key=proposal_rank)
    assert ordered == [fast, slow, missing, overflowing, invalid]
    assert proposal_rank({"turn": 1})[-1] == float("inf")  # no score: last among equals


def test_keep_best_prefers_better_proposal_within_a_turn() -> None:
    bad = _proposal(1, valid=False, name="tp=3")
    good = _proposal(1, name="tp=2")
    assert keep_best(bad, good) is good
    assert keep_best(good, bad) is good
    assert keep_best(None, bad) is bad
    assert keep_best(good, None) is good


def test_keep_best_keeps_earlier_on_a_tie() -> None:
    first, second = _proposal(1, name="a"), _proposal(1, name="b")
    assert keep_best(first, second) is first


def test_keep_best_lets_a_new_turn_replace_the_old_best() -> None:
    old_good = _proposal(1, name="tp=2")
    new_bad = _proposal(2, valid=False, name="tp=3")
    assert keep_best(old_good, new_bad) is new_bad
    assert keep_best(new_bad, old_good) is new_bad  # an earlier turn never comes back
