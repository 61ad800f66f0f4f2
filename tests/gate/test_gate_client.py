"""The gate's state as ``homelab status`` and the TUI word it, from a real ``GateState``'s
JSON; and a gate that does not answer reads as unknown (None), never as zeros."""

from __future__ import annotations

from homelab.gate.client import describe_gate_state, read_gate_state
from homelab.gate.state import GateState, ReprefillAlarm
from tests.factory.server_log import free_port


def _state(**changes) -> dict[str, object]:
    values = dict(
        url="http://127.0.0.1:8080",
        engine_url="http://127.0.0.1:8081",
        budget_tokens=6963,
        ceiling_tokens=3481,
        max_concurrent=2,
        charged_tokens=1200,
        running=1,
        queued=2,
        admitted=7,
        refused={"queue_full": 0, "timeout": 1, "too_large": 0, "client_gone": 2},
        cache_hit_rate=0.875,
    )
    values.update(changes)
    return GateState(**values).to_json()


def test_the_lines_name_the_queue_the_charge_refusals_and_hit_rate() -> None:
    lines = describe_gate_state(_state())
    assert lines == [
        "gate: 1 running · 2 queued · 1,200 of 6,963 tokens charged",
        "admitted 7 · refused timeout 1, client_gone 2 · prompt-cache hits 88%",
    ]


def test_an_unknown_budget_and_hit_rate_read_as_unknown_not_zero() -> None:
    lines = describe_gate_state(_state(budget_tokens=None, cache_hit_rate=None, refused={}))
    assert lines == [
        "gate: 1 running · 2 queued · 1,200 of ? tokens charged",
        "admitted 7 · prompt-cache hits –",
    ]


def test_the_latest_re_prefill_alarm_is_named() -> None:
    alarms = (
        ReprefillAlarm(at=1.0, conversation="ab12", prompt_tokens=900, cached_tokens=10, slot=0),
        ReprefillAlarm(at=2.0, conversation="cd34", prompt_tokens=1500, cached_tokens=0, slot=1),
    )
    lines = describe_gate_state(_state(alarms=alarms))
    assert lines[-1] == (
        "⚠ 2 re-prefill alarm(s); latest: conversation cd34 re-processed its prompt "
        "(0 of 1500 tokens cached)"
    )


def test_a_gate_that_does_not_answer_is_unknown() -> None:
    assert read_gate_state(f"http://127.0.0.1:{free_port()}") is None
