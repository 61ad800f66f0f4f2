"""The prompt-cache alarm's rule (``homelab.engine.llamacpp.reuse_alarm.ReuseWatch``).

Statuses are built from the client's own dataclasses with the counters' differences a
window would have; the rule is pure, so every branch of its stated condition is checked.
"""

from __future__ import annotations

from homelab.engine.llamacpp.answers import SlotStatus
from homelab.engine.llamacpp.client import Health, HealthState, LiveStatus
from homelab.engine.llamacpp.metrics import MetricsWindow
from homelab.engine.llamacpp.reuse_alarm import MIN_TOKENS, ReuseWatch

READY = Health(HealthState.READY, 200, "ok")


def _status(held: int, busy: bool, reuse: tuple[int, int] | None) -> LiveStatus:
    window = None
    if reuse is not None:
        cached, processed = reuse
        window = MetricsWindow(processed, cached, 1.0, 4, 0.1)
    slot = SlotStatus(id=0, n_ctx=4096, is_processing=busy, n_prompt_tokens=held)
    return LiveStatus("http://127.0.0.1:1", 0.0, READY, slots=(slot,), window=window)


def test_first_turn_on_an_empty_cache_never_alarms() -> None:
    watch = ReuseWatch()
    assert watch.update(_status(0, False, None)) is None
    assert watch.update(_status(1500, True, None)) is None
    assert watch.update(_status(1500, False, (0, 1500))) is None
    assert watch.held_idle == 1500


def test_a_reused_turn_does_not_alarm_a_changed_one_does() -> None:
    watch = ReuseWatch()
    watch.update(_status(1500, False, (0, 1500)))
    assert watch.update(_status(1600, False, (1490, 110))) is None
    alarm = watch.update(_status(1500, False, (20, 1480)))
    assert alarm is not None
    assert (alarm.processed, alarm.cached, alarm.held_before) == (1480, 20, 1600)
    assert alarm.share > 0.5


def test_short_prompts_and_half_reuse_do_not_alarm() -> None:
    watch = ReuseWatch()
    watch.update(_status(2000, False, None))
    assert watch.update(_status(2000, False, (0, MIN_TOKENS - 1))) is None
    assert watch.update(_status(2000, False, (1500, 1500))) is None  # exactly half


def test_held_is_read_only_while_every_slot_is_idle() -> None:
    watch = ReuseWatch()
    watch.update(_status(1500, True, None))  # the first prompt, being processed
    assert watch.held_idle == 0
    assert watch.update(_status(1500, False, (0, 1500))) is None
