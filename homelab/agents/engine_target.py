"""The target of the engine homelab runs: its record (plan facts, gate) and its ``/v1/models``.

The record (:class:`~homelab.engine.supervision.record.EngineRecord`) says how the engine
was planned (``facts``) and, when the gate stands in front, the gate's URL and per-request
ceiling (``gate_url``, ``gate_budget_tokens``). The gate's key is never in the record: it
lives in ``state_dir()/gate.key``, read by :func:`homelab.gate.key_file.stored_key` (the
one reader: 0600 or refused).
The model id is what the server itself reports (``GET /v1/models``, asked at the URL the
agent will use, so a target that is handed out is one that answered).
"""

from __future__ import annotations

from typing import Protocol

import httpx

from homelab.agents.target import AgentTarget, target_for
from homelab.engine.loopback import loopback_client
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.set_record import SetRecord
from homelab.engine.supervision.state_file import StateFile
from homelab.errors import EngineError
from homelab.gate.key_file import key_path, stored_key


class Served(Protocol):
    """What a hand-off needs of what is served: an engine's record, or a set's main model."""

    @property
    def facts(self) -> PlanFacts | None: ...
    @property
    def model(self) -> str: ...
    @property
    def engine(self) -> str: ...


_ANY_ADDRESS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}


class NoEngineError(EngineError):
    """homelab runs no engine: there is nothing to point an agent at."""

    title = "No engine running"


class EngineNotAnsweringError(EngineError):
    """The engine (or its gate) runs but did not name its model."""

    title = "Engine not answering"


def local_url(url: str) -> str:
    """``url`` as a client on this machine reaches it (a gate bound to every address is
    reached on loopback)."""
    parsed = httpx.URL(url)
    host = parsed.host if ":" not in parsed.host else f"[{parsed.host}]"
    if host in _ANY_ADDRESS:
        return str(parsed.copy_with(host=_ANY_ADDRESS[host].strip("[]"))).rstrip("/")
    return url.rstrip("/")


def served_model(base_url: str, api_key: str | None = None) -> str:
    """The model id ``base_url`` serves (the first of ``GET /v1/models``).

    Raises:
        EngineNotAnsweringError: no answer, an error status, or no model in it.
        NotLoopbackError: ``base_url`` is not on this machine's loopback.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    with loopback_client(base_url, timeout_s=5.0, headers=headers) as http:
        try:
            response = http.get("/v1/models")
        except httpx.TransportError as error:
            raise EngineNotAnsweringError(
                f"{base_url} did not answer /v1/models ({type(error).__name__}: {error})",
                hint="check it with `homelab status`",
            ) from None
    if response.status_code == 503:
        raise EngineNotAnsweringError(
            f"{base_url} is still loading the model (HTTP 503)",
            hint="wait until `homelab status` says ready, then run this again",
        )
    if response.status_code in (401, 403):
        raise EngineNotAnsweringError(
            f"{base_url} refused homelab's key for /v1/models (HTTP {response.status_code})",
            hint=f"the gate's key is read from {key_path()}",
        )
    if response.status_code != 200:
        raise EngineNotAnsweringError(
            f"{base_url} answered /v1/models with HTTP {response.status_code}",
            hint="check it with `homelab status`",
        )
    try:
        data = response.json()
        model = data["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise EngineNotAnsweringError(
            f"{base_url}/v1/models names no model: {response.text[:160]!r}",
            hint="is this port homelab's engine? `homelab status` says which port it uses",
        ) from None
    if not isinstance(model, str) or not model:
        raise EngineNotAnsweringError(f"{base_url}/v1/models gave the model id {model!r}")
    return model


def engine_target(record: EngineRecord) -> AgentTarget:
    """The target of the engine ``record`` describes (the gate when it has one).

    Raises:
        EngineError: the engine runs without plan facts, or is between restarts.
        EngineNotAnsweringError: it (or its gate) did not name its model.
    """
    facts = record.facts
    if facts is None:
        raise EngineError(
            f"the engine at {record.url} was started without a plan: homelab does not know "
            "how much context one request has there",
            hint="start it again with `homelab serve MODEL` (with `replace`)",
            title="No plan for this engine",
        )
    if not record.engine_alive():
        raise EngineError(
            f"the engine serving {record.model} is between restarts (last pid {record.pid})",
            hint="wait a moment; `homelab status` shows when it is back",
            title="Engine restarting",
        )
    gate_url, budget = record.gate_url, record.gate_budget_tokens
    base = local_url(gate_url) if gate_url else record.url
    key = stored_key() if gate_url else None
    model = served_model(base, key if gate_url else record.api_key)  # the engine's own key
    # is homelab's alone: an agent is never given it (a gated engine is reached by its gate)
    return target_for(
        facts,
        base_url=base,
        model=model,
        gated=gate_url is not None,
        gate_budget_tokens=budget,
        api_key=key,
        engine=record.engine,
        gate_max_tokens=record.gate_max_tokens,
    )


def running_engine(store: StateFile | None = None) -> tuple[Served, AgentTarget]:
    """What homelab serves now and its target (see :func:`engine_target`): a set of models
    (:func:`~homelab.agents.set_target.set_target`) or one engine, the one started last when
    both run.

    Raises:
        NoEngineError: homelab serves nothing.
    """
    from homelab.engine.supervision.set_record import read_set

    store = store if store is not None else StateFile()
    record = store.live()
    served_set = read_set()
    if served_set is not None and (record is None or served_set.started_at >= record.started_at):
        return set_served(served_set)
    if record is None:
        raise NoEngineError(
            f"homelab runs no engine right now (no live record in {store.path})",
            hint="start one with `homelab serve MODEL` (`detach` keeps it running), "
            "then run this again",
        )
    return record, engine_target(record)


def set_served(record: SetRecord) -> tuple[Served, AgentTarget]:
    """The set ``record`` describes and its target, reached at its gate with homelab's key."""
    from homelab.agents.set_target import set_target

    return set_target(record, local_url(record.gate_url), stored_key())


def running_target(store: StateFile | None = None) -> AgentTarget:
    """The target of what homelab serves now (see :func:`running_engine`)."""
    return running_engine(store)[1]
