"""The traffic shapes: independent prompts share no first word; an agent turn carries the
whole history plus a new part."""

from __future__ import annotations

import pytest

from homelab.errors import UsageError
from homelab.measure.settings import BenchSettings, default_levels, default_prompt_tokens
from homelab.measure.shapes import (
    WORDS,
    AgentSession,
    Workload,
    first_word,
    independent_prompt,
    largest_prompt,
    system_prompt,
    turn_part,
)


def test_independent_prompts_differ_from_the_first_word() -> None:
    count = 3 * len(WORDS)
    firsts = {independent_prompt(i, 12).split()[0] for i in range(count)}
    assert len(firsts) == count
    assert len(independent_prompt(5, 40).split()) == 40


def test_agent_turns_carry_the_history_and_a_new_part() -> None:
    session = AgentSession(system_prompt(30), 0)
    first = session.prompt(turn_part(0, 0, 10))
    session.answered(turn_part(0, 0, 10), " a reply")
    second = session.prompt(turn_part(0, 1, 10))
    assert second.startswith(first + " a reply")
    assert second.startswith(system_prompt(30)) and first != second
    other = AgentSession(system_prompt(30), 1).prompt(turn_part(1, 0, 10))
    assert other.startswith(system_prompt(30)) and not other.startswith(first)


def test_defaults_come_from_the_engine_and_fit_one_slot() -> None:
    assert default_levels(8) == (1, 2, 4, 8)
    assert default_levels(6) == (1, 2, 4, 6)
    assert default_levels(None) == (1, 2, 4)
    n = default_prompt_tokens(Workload.AGENT, 32, 3, 2048)
    assert (
        largest_prompt(Workload.AGENT, n, 32, 3)
        <= 2048
        < largest_prompt(Workload.AGENT, n * 2, 32, 3)
    )
    settings = BenchSettings("http://127.0.0.1:1", prompt_tokens=4000, turns=3)
    with pytest.raises(UsageError, match="one slot of this engine holds 2,048") as caught:
        settings.for_engine(2, 2048)
    assert "`prompt_tokens`" in (caught.value.hint or "")
    assert first_word(0) != first_word(len(WORDS))
