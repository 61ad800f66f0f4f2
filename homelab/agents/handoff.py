"""Everything ``homelab agent NAME`` knows before it hands the URL over: the setup, whether
the agent accepts the context one request has (and the plan that would give it enough),
and the contract check's verdict. The CLI prints it, ``--json`` dumps it, the TUI shows
the verdict next to the URL: one object, computed once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from homelab.agents.catalog import agent_kind, prepare
from homelab.agents.contract import Verdict, check
from homelab.agents.engine_target import Served
from homelab.agents.limits import agent_limit
from homelab.agents.set_target import SetServed, set_note
from homelab.agents.setup import AgentSetup
from homelab.agents.shortfall import Shortfall, plan_offer, shortfall
from homelab.agents.target import AgentTarget
from homelab.errors import ExitCode
from homelab.plan.options import PlanOptions


@dataclass(frozen=True, slots=True)
class HandOff:
    """One agent's hand-off to the running engine."""

    agent: str
    title: str
    setup: AgentSetup
    shortfall: Shortfall | None
    """None: one request holds what the agent accepts."""
    verdict: Verdict | None
    """The contract check; None when it was not run."""

    @property
    def target(self) -> AgentTarget:
        return self.setup.target

    @property
    def exit_code(self) -> ExitCode:
        """What ``--check`` exits with: the context first (nothing else helps without it),
        then the contract."""
        if self.shortfall is not None:
            return ExitCode.DOES_NOT_FIT
        if self.verdict is not None and not self.verdict.ok:
            return ExitCode.AGENT_CONTRACT
        return ExitCode.OK

    def to_json(self, state: Path) -> dict[str, object]:
        target, setup = self.target, self.setup
        limit = agent_limit(self.agent)
        return {
            "agent": self.agent,
            "title": self.title,
            "url": target.base_url,
            "gated": target.gated,
            "model": target.model,
            "small_model": target.small_model,
            "fim_model": target.fim_model,
            "engine": target.engine,
            "context_tokens": target.context_tokens,
            "context_source": target.context.source,
            "max_output_tokens": target.max_output_tokens,
            "minimum_tokens": limit.minimum_tokens,
            "rule": limit.rule,
            "accepts": self.shortfall is None,
            "shortfall": None if self.shortfall is None else self.shortfall.to_json(),
            "warnings": list(setup.warnings),
            "env": setup.env,
            "unset": list(setup.unset),
            "argv": setup.argv(state),
            "contract": None if self.verdict is None else self.verdict.to_json(),
            "exit_code": int(self.exit_code),
        }


def hand_off(
    name: str,
    record: Served,
    target: AgentTarget,
    options: PlanOptions,
    *,
    probe: bool = True,
    timeout_s: float | None = None,
) -> HandOff:
    """Agent ``name``'s hand-off to the engine ``record`` describes (``target``).

    Args:
        options: the card to plan an offer on, with the agent's workload (used only when
            one request holds less than the agent accepts).
        probe: run the contract check through ``target`` (the gate).

    Raises:
        UsageError: homelab knows no such agent.
    """
    kind = agent_kind(name)
    setup = prepare(name, target)
    short = shortfall(name, kind.title, target, record.facts)
    if short is not None:
        offer = (
            (None, set_note(name, record.model, target))
            if isinstance(record, SetServed)
            else plan_offer(name, kind.title, record.model, record.engine, options)
        )
        short = shortfall(name, kind.title, target, record.facts, offer)
    verdict = check(name, target, timeout_s) if probe else None
    return HandOff(name, kind.title, setup, short, verdict)
