"""The bare admission queue, on tiny budgets (after TGI's ``test_next_batch_token_budget``)."""

from __future__ import annotations

import pytest

from homelab.gate.admission import AdmissionState, Refusal


def state(budget: int = 3, max_concurrent: int = 8, max_queue: int = 8, ceiling=None):
    return AdmissionState(
        budget=budget, max_concurrent=max_concurrent, max_queue=max_queue, ceiling=ceiling
    )


def waiting(s: AdmissionState) -> list[int]:
    """The queued ids, head first."""
    return list(s._queue)


def test_admits_in_order_while_the_budget_holds_and_stops_at_the_first_that_does_not_fit() -> None:
    s = state(budget=3)
    assert s.offer(1, 1).admitted == (1,)
    assert s.offer(2, 2).admitted == (2,)
    assert s.charged == 3
    assert s.offer(3, 2).admitted == ()
    # nothing is left; 4 waits behind 3 and will never overtake it
    assert s.offer(4, 1).admitted == ()
    assert (s.queued, waiting(s)) == (2, [3, 4])
    assert s.release(1) == ()  # 1 token free, the head (3) needs 2: nobody passes it
    assert waiting(s) == [3, 4]
    assert s.release(2) == (3, 4)  # 3 tokens free: the head, then the next
    assert (s.charged, s.running, s.queued) == (3, 2, 0)


def test_a_small_request_behind_a_large_one_waits_for_it() -> None:
    s = state(budget=3)
    s.offer(1, 2)
    assert s.offer(2, 3).admitted == ()  # the head needs the whole budget
    assert s.offer(3, 1).admitted == ()  # 1 token is free, but 2 is first
    assert s.release(1) == (2,)
    assert s.release(2) == (3,)


def test_max_concurrent_stops_admission_even_with_tokens_left() -> None:
    s = state(budget=100, max_concurrent=2)
    assert s.offer(1, 1).admitted == (1,)
    assert s.offer(2, 1).admitted == (2,)
    assert s.offer(3, 1).admitted == ()
    assert s.release(2) == (3,)
    assert s.running == 2


def test_larger_than_the_ceiling_is_refused_at_once_and_never_queued() -> None:
    s = state(budget=3)
    assert s.offer(1, 4).refused is Refusal.TOO_LARGE
    assert (s.queued, s.running) == (0, 0)
    s = state(budget=10, ceiling=4)
    assert s.offer(1, 5).refused is Refusal.TOO_LARGE
    assert s.offer(2, 4).admitted == (2,)


def test_a_full_queue_refuses_the_newcomer_but_not_one_that_runs_at_once() -> None:
    s = state(budget=2, max_queue=1)
    s.offer(1, 2)
    assert s.offer(2, 1).refused is None
    assert s.offer(3, 1).refused is Refusal.QUEUE_FULL
    s = state(budget=2, max_queue=0)
    assert s.offer(1, 1).admitted == (1,)
    assert s.offer(2, 2).refused is Refusal.QUEUE_FULL


def test_abandoning_the_blocking_head_admits_the_ones_behind() -> None:
    s = state(budget=3)
    s.offer(1, 2)
    s.offer(2, 3)
    s.offer(3, 1)
    assert s.abandon(2) == (3,)
    assert s.abandon(2) == ()  # idempotent


def test_reconcile_corrects_a_running_charge_and_admits_what_now_fits() -> None:
    s = state(budget=4)
    s.offer(1, 4)
    s.offer(2, 2)
    assert s.reconcile(1, 2) == (2,)
    assert s.charged == 4
    assert s.reconcile(2, 3) == ()  # more than thought: nobody is evicted, charged goes over
    assert s.charged == 5
    assert s.reconcile(99, 1) == ()


def test_release_of_an_unknown_id_changes_nothing_and_duplicates_are_rejected() -> None:
    s = state(budget=2)
    s.offer(1, 1)
    assert s.release(7) == ()
    with pytest.raises(ValueError):
        s.offer(1, 1)


def test_lower_limits_hold_new_admissions_until_room_is_free() -> None:
    s = state(budget=4, max_concurrent=4)
    s.offer(1, 2)
    s.offer(2, 2)
    s.set_limits(budget=2, max_concurrent=1)
    s.offer(3, 1)
    assert s.release(1) == ()  # still 2 charged = the new budget
    assert s.release(2) == (3,)


def test_a_request_of_several_prompts_takes_a_place_per_prompt() -> None:
    s = AdmissionState(budget=1000, max_concurrent=3, max_queue=4, ceiling=400)
    assert s.offer(1, 700, places=2).admitted == (1,)  # two prompts of at most 350 + cap
    assert s.running == 2 and s.charged == 700
    assert s.offer(2, 100, places=2).admitted == ()  # one place left: it waits
    assert s.offer(3, 100).admitted == ()  # FIFO: nothing overtakes the waiting one
    assert s.release(1) == (2, 3)
    assert s.running == 3 and s.charged == 200
    assert s.offer(4, 900, places=2).refused is Refusal.TOO_LARGE  # 2 × 400 is the most
    assert s.offer(5, 1200, places=4).refused is Refusal.TOO_LARGE  # more than the budget


def test_new_limits_keep_the_queue_and_running_charges_and_name_what_never_fits() -> None:
    s = state(budget=10, max_concurrent=1, ceiling=10)
    s.offer(1, 6)  # running
    s.offer(2, 8)  # queued: fits the old ceiling, not the new one
    s.offer(3, 3)  # queued behind it
    offer = s.set_limits(budget=20, max_concurrent=2, ceiling=5)
    assert offer.refused is Refusal.TOO_LARGE and s.dropped == (2,)  # it could never run
    assert offer.admitted == (3,)  # the one behind it now runs beside the first
    assert s.charged == 9 and 1 in s._running  # the admitted one kept its charge
    assert s.running == 2 and s.queued == 0
    assert s.offer(4, 6).refused is Refusal.TOO_LARGE  # the new ceiling holds for newcomers
    assert s.set_limits(budget=20, max_concurrent=2).refused is None and s.dropped == ()
    with pytest.raises(ValueError):
        s.set_limits(budget=0, max_concurrent=1)
