"""The agents ``homelab agent`` knows, and :func:`prepare`, which computes one's setup."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from homelab.agents import aider, claude, codex, continue_dev, opencode
from homelab.agents.limits import agent_limit
from homelab.agents.output_cap import output_cap_warning
from homelab.agents.setup import AgentSetup
from homelab.agents.target import AgentTarget
from homelab.engine.kinds import KINDS
from homelab.errors import UsageError
from homelab.plan.workload import Workload


@dataclass(frozen=True, slots=True)
class AgentKind:
    """One agent: its name, what it is, its program and how to install it."""

    name: str
    title: str
    program: str
    build: Callable[[AgentTarget], AgentSetup]
    install: str
    """How to install the program (shown when it is missing)."""


AGENTS: dict[str, AgentKind] = {
    kind.name: kind
    for kind in (
        AgentKind(
            claude.NAME,
            "Claude Code",
            claude.PROGRAM,
            claude.setup,
            "npm install -g @anthropic-ai/claude-code",
        ),
        AgentKind(
            opencode.NAME,
            "OpenCode",
            opencode.PROGRAM,
            opencode.setup,
            "npm install -g opencode-ai",
        ),
        AgentKind(
            codex.NAME, "Codex CLI", codex.PROGRAM, codex.setup, "npm install -g @openai/codex"
        ),
        AgentKind(
            aider.NAME,
            "Aider",
            aider.PROGRAM,
            aider.setup,
            "python -m pip install aider-install && aider-install",
        ),
        AgentKind(
            continue_dev.NAME,
            "Continue",
            continue_dev.PROGRAM,
            continue_dev.setup,
            "npm install -g @continuedev/cli (the IDE extension takes the printed block)",
        ),
    )
}
"""Every agent by name, in the order the help lists them."""


def agent_kind(name: str) -> AgentKind:
    """The agent called ``name``.

    Raises:
        UsageError: homelab knows no such agent.
    """
    kind = AGENTS.get(name)
    if kind is None:
        raise UsageError(
            f"homelab knows no agent {name!r}",
            hint=f"choose one of: {', '.join(AGENTS)}",
        )
    return kind


def workload_for(name: str) -> Workload:
    """What ``--for NAME`` plans each slot for (:meth:`AgentLimit.workload
    <homelab.agents.limits.AgentLimit.workload>`).

    Raises:
        UsageError: homelab knows no such agent.
    """
    return agent_limit(name).workload(agent_kind(name).title)


def target_warnings(target: AgentTarget) -> tuple[str, ...]:
    """Warnings about the target itself, whatever the agent (vLLM schedules its pooled
    cache itself: only llama.cpp fails a request the pool cannot hold)."""
    kind = KINDS.get(target.engine)
    if target.context.shared_pool and kind is not None and kind.fails_past_pool:
        return (
            f"no gate in front of a unified KV pool: one request may use up to "
            f"{target.context_tokens:,} tokens only while no other request holds cells; "
            "concurrent requests can fail with 'Context size has been exceeded'. Serve with "
            "the gate (the default) to queue them instead.",
        )
    return ()


def prepare(name: str, target: AgentTarget) -> AgentSetup:
    """Agent ``name``'s setup for ``target``, with every warning that applies.

    Raises:
        UsageError: homelab knows no such agent.
    """
    kind = agent_kind(name)
    setup = kind.build(target)
    cut = output_cap_warning(name, kind.title, target)
    own = setup.warnings + (() if cut is None else (cut,))
    return replace(setup, warnings=target_warnings(target) + own)
