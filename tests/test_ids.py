"""Ids are unguessable and sort by creation time (issue 8: ids are random, not sequential)."""

from __future__ import annotations

from agentos.ids import new_id


def test_ids_are_random_not_sequential() -> None:
    ids = [new_id("ses") for _ in range(1000)]
    assert len(set(ids)) == 1000
    tails = [int(i[-24:], 16) for i in ids]  # the random part
    steps = {b - a for a, b in zip(tails, tails[1:], strict=False)}
    assert len(steps) > 990  # a counter would step by 1 every time
    assert all(len(i) == len("ses_") + 36 for i in ids)


def test_ids_sort_by_creation_time() -> None:
    first = new_id("ses")
    later = [new_id("ses") for _ in range(50)]
    assert all(first[:16] <= i[:16] for i in later)  # the time prefix never goes back
