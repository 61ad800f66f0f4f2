"""When the gate cuts answers shorter than the plan leaves room for: say so, with the fix.

Each agent is told the answer bound the gate really enforces (its ``max_tokens_cap``, read
from the engine record: :attr:`~homelab.agents.target.AgentTarget.gate_max_tokens`), never
homelab's default above it: an agent told more than the gate lets through plans answers
the gate cuts, and Claude Code then fails a run naming a bound nobody enforces. When that
cap is below what the plan leaves room for (half the window, at most the default), one
line says what this agent does with an answer cut there (its own rule:
:mod:`homelab.agents.limits`) and which setting gives it the room back.
"""

from __future__ import annotations

from homelab.agents.limits import agent_limit
from homelab.agents.target import AgentTarget, planned_output_tokens
from homelab.gate.config_file import config_path


def output_cap_warning(agent: str, title: str, target: AgentTarget) -> str | None:
    """The one line for ``agent`` when the gate's cap is below the plan's answer room; None
    when it is not (or no gate, or the record does not say)."""
    cap = target.gate_max_tokens
    room = planned_output_tokens(target.context_tokens)
    if cap is None or cap >= room:
        return None
    return (
        f"the gate cuts every answer at {cap:,} tokens (its max_tokens_cap), below the "
        f"{room:,} this plan leaves room for; {title} is told {cap:,} "
        f"({agent_limit(agent).output_rule}): set `max_tokens_cap = {room}` in "
        f"{config_path()} and serve again with `--replace`."
    )
