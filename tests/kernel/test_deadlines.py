"""The human deadline set: ordered, and bounded by its live entries (issue #7, defect 5)."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentos.kernel.deadlines import DeadlineSet


def test_removed_deadlines_do_not_stay_in_memory() -> None:
    deadlines = DeadlineSet()
    for i in range(1000):
        deadlines.add(f"r{i}", 1000.0 - i)
    for i in range(999):
        assert deadlines.remove(f"r{i}")
    assert len(deadlines) == 1 and deadlines.heap_size <= 2
    assert deadlines.next() == 1.0
    assert not deadlines.remove("r0")  # already gone


def test_a_key_added_again_fires_at_its_new_deadline_only() -> None:
    deadlines = DeadlineSet()
    deadlines.add("r1", 5.0)
    deadlines.add("r2", 1.0)
    deadlines.add("r3", 2.0)
    deadlines.remove("r1")  # dead, not on top: it stays until a rebuild
    deadlines.add("r1", 9.0)
    assert deadlines.heap_size == 4 and deadlines.get("r1") == 9.0
    assert deadlines.pop_due(5.0) == "r2"
    assert deadlines.pop_due(5.0) == "r3"
    assert deadlines.pop_due(5.0) is None  # the old 5.0 entry of r1 is dead
    assert deadlines.pop_due(9.0) == "r1"
    assert deadlines.next() is None and deadlines.heap_size == 0


def test_removing_the_top_exposes_the_next_live_one() -> None:
    deadlines = DeadlineSet()
    for key, deadline_s in [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)]:
        deadlines.add(key, deadline_s)
    deadlines.remove("b")
    deadlines.remove("a")  # b's dead entry is now on top and must go too
    assert deadlines.next() == 3.0


def test_adding_a_live_key_twice_is_a_bug() -> None:
    deadlines = DeadlineSet()
    deadlines.add("r1", 1.0)
    with pytest.raises(AssertionError):
        deadlines.add("r1", 2.0)


KEYS = st.sampled_from([f"r{i}" for i in range(8)])


class DeadlineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.deadlines = DeadlineSet()
        self.model: dict[str, float] = {}

    @rule(key=KEYS, deadline_s=st.integers(0, 50))
    def add(self, key: str, deadline_s: int) -> None:
        if key not in self.model:
            self.deadlines.add(key, float(deadline_s))
            self.model[key] = float(deadline_s)

    @rule(key=KEYS)
    def remove(self, key: str) -> None:
        assert self.deadlines.remove(key) == (self.model.pop(key, None) is not None)

    @precondition(lambda self: self.model)
    @rule(now=st.integers(0, 50))
    def pop_due(self, now: int) -> None:
        key = self.deadlines.pop_due(float(now))
        due = {k: d for k, d in self.model.items() if d <= now}
        if key is None:
            assert not due
        else:
            assert due.get(key) == min(due.values())  # the earliest due one
            del self.model[key]

    @invariant()
    def bounded_and_ordered(self) -> None:
        assert self.deadlines.heap_size <= 2 * len(self.model)
        assert len(self.deadlines) == len(self.model)
        assert self.deadlines.next() == (min(self.model.values()) if self.model else None)
        assert all(self.deadlines.get(k) == d for k, d in self.model.items())


TestDeadlineMachine = DeadlineMachine.TestCase
TestDeadlineMachine.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
