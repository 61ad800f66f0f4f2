"""The agent contract check: one short probe through the gate of each route an agent speaks,
before it is handed the URL, and a one-line verdict.

An agent edits files only through structured tool calls: a chat template that renders the
tools but whose answers llama-server cannot parse back into ``tool_calls`` (or a server
started without ``--jinja``, which refuses ``tools`` with "tools param requires --jinja
flag") leaves the agent talking but unable to act. Each probe asks for a tool call the way
the agent's own API does, with the call required (``tool_choice`` ``required`` / Anthropic
``any``), so the answer shows whether the server's template and parser produce a
structured call at all, whatever the model would choose on its own:

- chat (OpenCode, Aider, Continue): ``POST /v1/chat/completions`` → ``choices[0].message.
  tool_calls``;
- Anthropic (Claude Code): ``POST /v1/messages`` → a ``tool_use`` content block, and
  ``POST /v1/messages/count_tokens`` → ``input_tokens`` (Claude Code 2.1.328 calls it:
  ``beta.messages.countTokens`` in its bundle);
- Responses (Codex): ``POST /v1/responses`` → an output item of type ``function_call``.

A probe never raises: a dead gate, an error status, a timeout or an answer that is not the
route's JSON is its verdict, in words.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx

from homelab.agents.target import AgentTarget
from homelab.engine.loopback import loopback_client

PROBE_TIMEOUT_S = 60.0
"""One probe's limit: a short answer, but it may queue at the gate behind real requests
(``homelab agent --probe-timeout`` sets another)."""
PROBE_MAX_TOKENS = 48
"""Enough for one small tool call's JSON; the gate caps it anyway."""
TOOL_NAME = "write_file"
TOOL_DESCRIPTION = "Write text to a file in the project."
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
    "required": ["path", "content"],
}
PROMPT = "Create the file hello.txt containing the word hi."
NO_TOOL_CALLS = "this model's template emits no tool calls: agents will not be able to edit files"


@dataclass(frozen=True, slots=True)
class Probe:
    """One route's answer to its probe."""

    route: str
    ok: bool
    """The route answered as the agent needs (a structured tool call where one was asked)."""
    detail: str
    """``tool call write_file`` or why not, for a person."""
    status: int | None = None
    """The HTTP status; None: no answer."""
    tool_call: bool | None = None
    """A structured tool call came back; None: the route was not asked for one."""

    def to_json(self) -> dict[str, object]:
        return {
            "route": self.route,
            "ok": self.ok,
            "status": self.status,
            "tool_call": self.tool_call,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the probes mean for one agent."""

    agent: str
    ok: bool
    line: str
    """``tool calls: ok`` or the first thing that will not work, in one line."""
    probes: tuple[Probe, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "line": self.line,
            "probes": [probe.to_json() for probe in self.probes],
        }


def _openai_tool() -> dict[str, object]:
    return {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": TOOL_DESCRIPTION,
            "parameters": TOOL_PARAMETERS,
        },
    }


def chat_body(model: str) -> dict[str, object]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [_openai_tool()],
        "tool_choice": "required",
        "max_tokens": PROBE_MAX_TOKENS,
        "temperature": 0,
    }


def messages_body(model: str) -> dict[str, object]:
    return {
        "model": model,
        "max_tokens": PROBE_MAX_TOKENS,
        "messages": [{"role": "user", "content": PROMPT}],
        "tools": [
            {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "input_schema": TOOL_PARAMETERS}
        ],
        "tool_choice": {"type": "any"},
        "temperature": 0,
    }


def count_body(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": PROMPT}]}


def responses_body(model: str) -> dict[str, object]:
    return {
        "model": model,
        "input": PROMPT,
        "tools": [
            {
                "type": "function",
                "name": TOOL_NAME,
                "description": TOOL_DESCRIPTION,
                "parameters": TOOL_PARAMETERS,
            }
        ],
        "tool_choice": "required",
        "max_output_tokens": PROBE_MAX_TOKENS,
        "temperature": 0,
        "stream": False,
    }


def chat_tool_call(data: Any) -> bool:
    calls = data["choices"][0]["message"].get("tool_calls") or []
    return any(
        _named_call(call["function"]["name"], call["function"]["arguments"]) for call in calls
    )


def messages_tool_call(data: Any) -> bool:
    if data.get("type") != "message":
        raise ValueError("not an Anthropic message")
    blocks = data["content"]
    return any(
        block.get("type") == "tool_use" and _named_call(block["name"], block["input"])
        for block in blocks
    )


def responses_tool_call(data: Any) -> bool:
    items = data["output"]
    return any(
        item.get("type") == "function_call" and _named_call(item["name"], item["arguments"])
        for item in items
    )


def counted(data: Any) -> bool:
    tokens = data["input_tokens"]
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens <= 0:
        raise ValueError(f"input_tokens {tokens!r}")
    return True


def _named_call(name: object, arguments: object) -> bool:
    """The probe's tool, with arguments that are a JSON object (text or already parsed)."""
    if name != TOOL_NAME:
        return False
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return False
    return isinstance(arguments, dict)


PROBES = {
    "/v1/chat/completions": (chat_body, chat_tool_call),
    "/v1/messages": (messages_body, messages_tool_call),
    "/v1/messages/count_tokens": (count_body, counted),
    "/v1/responses": (responses_body, responses_tool_call),
}
"""Each route: its probe's body and the reading of its answer (KeyError, TypeError,
ValueError, IndexError: not the route's JSON)."""

AGENT_ROUTES = {
    "claude": ("/v1/messages", "/v1/messages/count_tokens"),
    "codex": ("/v1/responses",),
    "opencode": ("/v1/chat/completions",),
    "aider": ("/v1/chat/completions",),
    "continue": ("/v1/chat/completions",),
}
"""The routes each agent speaks (see the agents' modules)."""


def _error_text(response: httpx.Response) -> str:
    """The server's own error message, short."""
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = None
    text = message if isinstance(message, str) and message else response.text
    return " ".join(text.split())[:160]


def probe_route(http: httpx.Client, route: str, model: str) -> Probe:
    """One probe of ``route`` (see the module docstring); never raises."""
    build, read = PROBES[route]
    asks_tool = read is not counted
    try:
        response = http.post(route, json=build(model))
    except httpx.TimeoutException:
        return Probe(route, False, f"no answer in {http.timeout.read:g} s")
    except httpx.TransportError as error:
        return Probe(route, False, f"no answer ({type(error).__name__})")
    status = response.status_code
    if status != 200:
        text = _error_text(response)
        if "--jinja" in text:
            return Probe(route, False, "the server runs without --jinja: it refuses tools", status)
        return Probe(route, False, f"HTTP {status}: {text}", status)
    try:
        found = read(response.json())
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        shown = " ".join(response.text.split())[:80]
        return Probe(route, False, f"answered with no {route} JSON: {shown!r}", status)
    if not asks_tool:
        return Probe(route, True, "input tokens counted", status)
    if found:
        return Probe(route, True, f"tool call {TOOL_NAME}", status, tool_call=True)
    return Probe(route, False, "no structured tool call in the answer", status, tool_call=False)


def probe_routes(
    target: AgentTarget, routes: tuple[str, ...], timeout_s: float | None = None
) -> tuple[Probe, ...]:
    """Probe each of ``routes`` once at ``target`` (the gate), in order, each within
    ``timeout_s`` (None: :data:`PROBE_TIMEOUT_S`)."""
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
    limit = PROBE_TIMEOUT_S if timeout_s is None else timeout_s
    with loopback_client(target.base_url, timeout_s=limit, headers=headers) as http:
        return tuple(probe_route(http, route, target.model) for route in dict.fromkeys(routes))


def verdict(agent: str, probes: tuple[Probe, ...]) -> Verdict:
    """The one-line verdict for ``agent`` from the probes of its routes."""
    mine = tuple(p for p in probes if p.route in AGENT_ROUTES.get(agent, ()))
    for probe in mine:
        if probe.tool_call is False:
            return Verdict(agent, False, NO_TOOL_CALLS, mine)
        if not probe.ok:
            return Verdict(agent, False, f"{probe.route}: {probe.detail}", mine)
    return Verdict(agent, True, "tool calls: ok", mine)


def check(agent: str, target: AgentTarget, timeout_s: float | None = None) -> Verdict:
    """Probe the routes ``agent`` speaks at ``target`` and judge them."""
    return verdict(agent, probe_routes(target, AGENT_ROUTES.get(agent, ()), timeout_s))


def check_served(url: str, api_key: str | None) -> dict[str, Verdict]:
    """Every agent's verdict at ``url`` (a gate or engine), for the model it serves.

    Raises:
        EngineNotAnsweringError: it does not name its model (``/v1/models``).
    """
    from homelab.agents.engine_target import served_model
    from homelab.agents.target import RequestContext

    model = served_model(url, api_key)
    context = RequestContext(PROBE_MAX_TOKENS * 2, "the contract check")
    return check_all(AgentTarget(url, model, context, PROBE_MAX_TOKENS, api_key=api_key))


def check_all(target: AgentTarget, timeout_s: float | None = None) -> dict[str, Verdict]:
    """Every agent's verdict from one probe of each route (the TUI's line by the URL)."""
    routes = tuple(route for routes in AGENT_ROUTES.values() for route in routes)
    probes = probe_routes(target, routes, timeout_s)
    return {agent: verdict(agent, probes) for agent in AGENT_ROUTES}


def summary(verdicts: dict[str, Verdict]) -> str:
    """One line for all agents: ``tool calls: ok`` or which agents fail and why."""
    failing = {agent: v.line for agent, v in verdicts.items() if not v.ok}
    if not failing:
        return "tool calls: ok"
    if len(set(failing.values())) == 1 and len(failing) == len(verdicts):
        return next(iter(failing.values()))
    return "; ".join(f"{agent}: {line}" for agent, line in failing.items())
