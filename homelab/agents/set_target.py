"""An agent's target when homelab serves a set of models behind one gate (``serve A B C``).

Which model of the set does which job, from the set's record
(:class:`~homelab.engine.supervision.set_record.SetRecord`):

- the **main** model (what the agent converses with): the first entry planned for the
  ``agent`` workload, else the first planned one;
- the **small** model (Claude Code's small-fast model, ``ANTHROPIC_SMALL_FAST_MODEL`` /
  ``ANTHROPIC_DEFAULT_HAIKU_MODEL``): an entry whose aliases name ``claude-haiku``, else the
  smallest (by its plan's bytes) of the ``chat`` and ``fim`` entries; the main model when
  the set has neither;
- the **FIM** model (Continue's autocomplete): the first ``fim`` entry; None without one.

The context an agent is told is what the main model's engine really has behind the gate:
the plan's facts bounded by the gate's per-request ceiling for that model (its gate takes it
from the engine's ``/props`` at load). A main model not loaded now is loaded first (a
``/props`` through the gate, as its first request would), so the ceiling is the engine's own.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace

import httpx

from homelab.agents.target import AgentTarget, target_for
from homelab.engine.kinds import DEFAULT_ENGINE
from homelab.engine.loopback import loopback_client
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.set_record import SetMember, SetRecord
from homelab.errors import EngineError

HAIKU_NAME = "claude-haiku"
"""What Claude Code's small-fast model ids start with (``claude-haiku-4-5-…``)."""
_HAIKU_SAMPLE = "claude-haiku-4-5-20251001"


@dataclass(frozen=True, slots=True)
class SetRoles:
    """The set's model for each job (ids)."""

    main: SetMember
    small: SetMember
    fim: SetMember | None


@dataclass(frozen=True, slots=True)
class SetServed:
    """What a hand-off needs of the served main model (as of an engine record)."""

    facts: PlanFacts | None
    model: str
    engine: str = DEFAULT_ENGINE


def _planned(record: SetRecord) -> list[SetMember]:
    return [m for m in record.members if m.facts is not None]


def _names_haiku(member: SetMember) -> bool:
    return any(
        HAIKU_NAME in alias.lower() or fnmatch.fnmatchcase(_HAIKU_SAMPLE, alias)
        for alias in member.aliases
    )


def set_roles(record: SetRecord) -> SetRoles:
    """Which model of ``record`` is the main, the small and the FIM one (see the module).

    Raises:
        EngineError: no model of the set could be planned (none can load).
    """
    planned = _planned(record)
    if not planned:
        raise EngineError(
            f"no model of the set at {record.gate_url} could be planned: none can load",
            hint="`homelab plan --models` says why each does not fit",
            title="No model to point an agent at",
        )
    main = next((m for m in planned if m.workload == "agent"), planned[0])
    haiku = next((m for m in planned if _names_haiku(m)), None)
    small_ones = [
        m
        for m in planned
        if m is not main and m.workload in ("chat", "fim") and m.total_bytes is not None
    ]
    small = haiku or min(small_ones, key=lambda m: m.total_bytes or 0, default=main)
    fim = next((m for m in planned if m.workload == "fim"), None)
    return SetRoles(main, small, fim)


def _ceiling(state: dict[str, object] | None, ident: str) -> int | None:
    models = None if state is None else state.get("models")
    for model in models if isinstance(models, list) else ():
        if isinstance(model, dict) and model.get("id") == ident:
            value = model.get("ceiling_tokens")
            return value if isinstance(value, int) and not isinstance(value, bool) else None
    return None


def _load(base: str, key: str | None, ident: str) -> None:
    """Ask the gate for ``ident``'s ``/props``: it loads the model as a request would."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    with loopback_client(base, timeout_s=600.0, headers=headers) as http:
        try:
            http.get("/props", params={"model": ident})
        except httpx.TransportError:
            pass  # the state read next says whether it loaded


def set_target(record: SetRecord, base: str, key: str | None) -> tuple[SetServed, AgentTarget]:
    """The target of the set ``record`` describes, reached at ``base`` (its gate) with
    ``key``: the main model's context, the small and FIM models' ids beside it.

    Raises:
        EngineError: no model of the set can load.
        EngineNotAnsweringError: the gate does not answer, or the main model did not load.
    """
    from homelab.agents.engine_target import EngineNotAnsweringError
    from homelab.gate.client import read_gate_state

    roles = set_roles(record)
    main = roles.main
    assert main.facts is not None  # set_roles picks planned models only
    state = read_gate_state(base, key)
    if state is None:
        raise EngineNotAnsweringError(
            f"the gate of the set at {base} does not answer",
            hint="check it with `homelab status`",
        )
    ceiling = _ceiling(state, main.id)
    if ceiling is None:
        _load(base, key, main.id)
        ceiling = _ceiling(read_gate_state(base, key), main.id)
    if ceiling is None:
        raise EngineNotAnsweringError(
            f"the set's model {main.id} did not load at {base}, so its context is not known",
            hint="`homelab status` shows why (a load failure is quoted there)",
        )
    fim = roles.fim
    target = target_for(
        main.facts,
        base_url=base,
        model=main.id,
        gated=True,
        gate_budget_tokens=ceiling,
        api_key=key,
        gate_max_tokens=record.gate_max_tokens,
    )
    target = replace(
        target,
        small_model=roles.small.id,
        fim_model=None if fim is None else fim.id,
        fim_context_tokens=None if fim is None or fim.facts is None else fim.facts.ctx_per_slot,
    )
    return SetServed(main.facts, main.model or main.id), target


def set_note(agent: str, model: str, target: AgentTarget) -> str:
    """What gives the set's main model (``model``, its file) more context: a hand-off does
    not re-plan a set."""
    return (
        f"the set places {target.model} beside its other models: stop the set and "
        f"`homelab serve {model} --for {agent}` alone, or list fewer models with it"
    )
