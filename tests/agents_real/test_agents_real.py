"""Each real coding agent, one-shot through ``homelab agent NAME -- …``, against SmolLM2
served by ``homelab serve`` behind its gate.

For each: exit 0, an answer on stdout, the gate's log of what it sent (the agent's route,
every request answered below 400, each charged) and no request past the context the agent
was told: the engine's own count of prompt and answer, the gate's charge and the answer
bound the agent asked all within what ``homelab agent`` handed it.

The runs are kept short for a 2-core CPU: a one-line prompt, one turn, and the agent's
own switches for a small system prompt where its default would not fit SmolLM2's 8,192
tokens (Claude Code's is ~48 kB with its tools, Codex's ~38 kB: see docs/agents.md). Each
run's time is printed (``-s``) and kept as a junit property.

Claude Code ends a print run with "API Error: Claude's response exceeded the N output token
maximum" (exit 1) when an answer stops at its bound, whatever bound it asked: so the gate's
cap here (:data:`~tests.agents_real.conftest.ANSWER_CAP`) leaves SmolLM2 room to end on its
own, and ``--bare`` drops the environment block Claude Code otherwise sends as a system
message after the prompt (SmolLM2 then rambles on about it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from homelab.agents.catalog import prepare
from homelab.agents.continue_dev import max_tokens as continue_max_tokens
from homelab.agents.engine_target import running_target
from homelab.agents.setup import AgentSetup
from tests.agents_real.conftest import ANSWER_CAP
from tests.agents_real.helpers import AgentRun, Served

pytestmark = [pytest.mark.engine, pytest.mark.agents_real]
PROMPT = "Say hello."
SYSTEM = "You are a helpful assistant."
"""SmolLM2 ends its answer to these within ~25 tokens most times (measured: 20–34)."""


@dataclass(frozen=True)
class Case:
    route: str
    """The completion route the agent speaks."""
    args: tuple[str, ...]
    """Its own non-interactive mode, one turn, the prompt."""


def opencode_config(home: Path) -> None:
    """The person's own OpenCode config (HOME's, under homelab's hand-off): the build
    agent with a short prompt and no tools."""
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True, exist_ok=True)
    agent = {"prompt": SYSTEM, "tools": {"*": False}}  # no tools: one step
    (folder / "opencode.json").write_text(json.dumps({"agent": {"build": agent}}))


def codex_instructions(home: Path) -> Path:
    path = home / "instructions.md"
    path.write_text(SYSTEM + "\n")
    return path


CASES = {
    "claude": Case(
        "/v1/messages",
        (
            "-p",
            PROMPT,
            "--max-turns",
            "1",
            "--tools",
            "",
            "--system-prompt",
            SYSTEM,
            "--no-session-persistence",
            "--bare",
        ),
    ),  # fmt: skip
    "codex": Case(
        "/v1/responses",
        (
            "exec",
            "--skip-git-repo-check",
            "--ephemeral",
            "-c",
            "model_instructions_file={home}/instructions.md",
            "-c",
            "include_permissions_instructions=false",
            "-c",
            "include_environment_context=false",
            "--disable",
            "multi_agent",
            "--disable",
            "goals",
            PROMPT,
        ),
    ),  # fmt: skip
    "opencode": Case("/v1/chat/completions", ("run", PROMPT)),
    "aider": Case(
        "/v1/chat/completions",
        (
            "--message",
            PROMPT,
            "--no-git",
            "--yes-always",
            "--no-check-update",
            "--no-analytics",
            "--no-show-release-notes",
            "--map-tokens",
            "0",
            "--no-pretty",
            "--no-fancy-input",
            "--no-detect-urls",
        ),
    ),  # fmt: skip
    "continue": Case("/v1/chat/completions", ("-p", PROMPT)),
}


def told_output(setup: AgentSetup) -> int:
    """The answer bound the agent was handed."""
    if setup.agent == "continue":
        return continue_max_tokens(setup.target)
    return setup.target.max_output_tokens


@pytest.mark.parametrize("agent", list(CASES))
def test_the_real_agent_answers_through_the_gate_within_what_it_was_told(
    agent: str,
    served: Served,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    record_property,
) -> None:
    monkeypatch.setenv("HOMELAB_STATE_DIR", served.env["HOMELAB_STATE_DIR"])
    setup = prepare(agent, running_target())  # what `homelab agent` hands the agent
    told = setup.target
    assert told.gated and told.base_url == served.url
    assert told.context_tokens == served.budget_tokens  # the gate's ceiling, told as is
    assert "/" not in told.model  # the served id, not the GGUF's path
    assert told.max_output_tokens == ANSWER_CAP  # the gate's cap, not the plan's 4,096
    assert any("max_tokens_cap" in w for w in setup.warnings)  # and said, with its fix
    home = tmp_path / "home"
    home.mkdir()
    opencode_config(home)
    codex_instructions(home)
    case = CASES[agent]
    args = tuple(a.replace("{home}", str(home)) for a in case.args)

    run: AgentRun = served.run_agent(agent, home, *args)

    record_property("seconds", round(run.seconds, 1))
    print(f"\n{agent}: {run.describe()}")
    assert run.result.returncode == 0, run.describe()
    assert run.result.stdout.strip(), run.describe()  # an answer
    assert "Traceback" not in run.result.stderr
    assert run.entries, "the gate logged no request of this run"
    assert all(e.status < 400 for e in run.entries), run.describe()
    completions = run.completions
    assert completions and {e.path for e in completions} == {case.route}, run.describe()
    for entry in completions:
        charge = entry.charge
        assert charge is not None and charge["model"] == told.model
        assert charge["ceiling_tokens"] == told.context_tokens
        assert charge["completion_cap"] <= ANSWER_CAP  # the gate's cap, written in
        charged = charge["charged_tokens"]
        assert isinstance(charged, int) and 0 < charged <= told.context_tokens
        engine_prompt, generated = (
            charge["engine_prompt_tokens"],
            charge["engine_completion_tokens"],
        )
        assert isinstance(engine_prompt, int) and isinstance(generated, int), entry
        assert engine_prompt + generated <= told.context_tokens
        asked = charge["asked_max_tokens"]
        assert asked is None or asked <= told_output(setup), entry  # its own bound, if any
        if agent == "claude" and charge["stream"]:  # its answer asks the bound it was told
            assert asked == told_output(setup), entry  # (a side request asks its own, less)
        assert charge["engine_error"] is None
