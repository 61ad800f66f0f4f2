"""``homelab agent`` end to end: real processes, the real llama-server serving SmolLM2.

An engine is served detached (``homelab serve --detach``), then ``homelab agent NAME
--print`` runs as its own process: what it prints must carry the plan's per-slot share and
a URL that answers. Launching is checked with small executables named like the agents on
PATH that record the arguments and environment homelab hands them.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from homelab.agents.contract import NO_TOOL_CALLS
from homelab.agents.engine_target import EngineNotAnsweringError, engine_target, served_model
from homelab.agents.target import DEFAULT_MAX_OUTPUT_TOKENS
from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.record import EngineRecord
from homelab.engine.supervision.state_file import StateFile
from homelab.gate.key_file import KEY_NAME
from homelab.paths import state_dir
from tests.engine.supervisor_child import REPO, script_env, serve_on_a_free_port
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine
PLAN = ["--vram", "8GiB", "--ctx", "2048", "--parallel", "2"]
RECORDER = """#!/bin/sh
printf '%s\\n' "$@" > "$AGENT_OUT/args"
env > "$AGENT_OUT/env"
"""


def homelab(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m homelab ARGS`` from the repository, with ``env`` over the test's own."""
    return subprocess.run(
        [sys.executable, "-m", "homelab", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**script_env(), **(env or {})},
        check=False,
    )


def exports(stdout: str) -> dict[str, str]:
    """The ``export NAME=VALUE`` lines, values unquoted as the shell would."""
    found = {}
    for line in stdout.splitlines():
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").partition("=")
            [found[name]] = shlex.split(value)
    return found


def fake_agent(folder: Path, name: str) -> Path:
    """An executable ``name`` in ``folder`` that records its arguments and environment."""
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text(RECORDER)
    path.chmod(0o755)
    return path


def recorded(out: Path) -> tuple[list[str], dict[str, str]]:
    args = (out / "args").read_text().splitlines()
    env = dict(line.split("=", 1) for line in (out / "env").read_text().splitlines() if "=" in line)
    return args, env


def serve_detached(
    model: Path, engines
) -> tuple[subprocess.CompletedProcess[str], EngineRecord | None]:
    """``homelab serve MODEL`` on :data:`PLAN`, detached, and its record (engine tracked)."""
    served, _ = serve_on_a_free_port(str(model), *PLAN, "--detach")
    record = StateFile().read()
    if record is not None:
        engines.track(record.pid)
    return served, record


def test_agents_get_the_served_engines_per_slot_share(
    smollm2_gguf: Path, engines, tmp_path: Path
) -> None:
    served, record = serve_detached(smollm2_gguf, engines)
    try:
        assert served.returncode == 0, served.stderr
        assert record is not None and record.facts is not None
        facts = record.facts
        assert facts.slots == 2 and not facts.unified and facts.ctx_per_slot < facts.ctx_total
        home = tmp_path / "home"
        home.mkdir()

        claude = homelab(
            "agent", "claude", "--print", "--probe-timeout", "600", env={"HOME": str(home)}
        )
        assert claude.returncode == 0, claude.stderr
        env = exports(claude.stdout)
        assert int(env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"]) == facts.ctx_per_slot
        assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in env  # below 100k Claude Code overrides it
        assert "unset ANTHROPIC_API_KEY" in claude.stdout.splitlines()
        assert "homelab: warning: Claude Code cannot work" in claude.stderr  # not on stdout
        assert f"homelab: agent contract: {NO_TOOL_CALLS}" in claude.stderr.splitlines()
        assert "homelab: offer: " in claude.stderr
        url = env["ANTHROPIC_BASE_URL"]
        assert url == record.gate_url  # through the admission gate
        models = httpx.get(f"{url}/v1/models", timeout=10, trust_env=False)
        assert models.status_code == 200
        assert models.json()["data"][0]["id"] == env["ANTHROPIC_MODEL"]
        answer = httpx.post(  # Claude Code's own API, as it would call it
            f"{url}/v1/messages",
            json={
                "model": env["ANTHROPIC_MODEL"],
                "max_tokens": 4,
                "messages": [{"role": "user", "content": "hi"}],
            },
            headers={"Authorization": f"Bearer {env['ANTHROPIC_AUTH_TOKEN']}"},
            timeout=60,
            trust_env=False,
        )
        assert answer.status_code == 200 and answer.json()["type"] == "message"

        opencode = homelab("agent", "opencode", "--print", "--no-probe", env={"HOME": str(home)})
        assert opencode.returncode == 0, opencode.stderr
        config = json.loads(exports(opencode.stdout)["OPENCODE_CONFIG_CONTENT"])
        provider_id, model = config["model"].split("/", 1)
        provider = config["provider"][provider_id]
        assert provider["models"][model]["limit"]["context"] == facts.ctx_per_slot
        base = provider["options"]["baseURL"]
        assert httpx.get(f"{base}/models", timeout=10, trust_env=False).status_code == 200

        # launching: the agent gets the same settings, its own arguments, not the user's key
        bin_dir, out = tmp_path / "bin", tmp_path / "out"
        out.mkdir()
        fake_agent(bin_dir, "claude")
        fake_agent(bin_dir, "codex")
        launch_env = {
            "HOME": str(home),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "AGENT_OUT": str(out),
            "ANTHROPIC_API_KEY": "the-users-own",
        }
        ran = homelab("agent", "claude", "--no-probe", "--", "-p", "say hi", env=launch_env)
        assert ran.returncode == 0, ran.stderr
        args, seen = recorded(out)
        assert args == ["-p", "say hi"]
        assert "ANTHROPIC_API_KEY" not in seen
        assert {k: seen[k] for k in env} == env

        ran = homelab("agent", "codex", "--no-probe", "--", "exec", "list files", env=launch_env)
        assert ran.returncode == 0, ran.stderr
        args, _ = recorded(out)
        assert args[-2:] == ["exec", "list files"]
        assert f"model_context_window={facts.ctx_per_slot}" in args
        assert not any(home.iterdir())  # nothing written where the user's agents keep config

        gated_record_is_read(record, facts)
    finally:
        stopped = homelab("stop")
        assert stopped.returncode == 0, stopped.stderr


def gated_record_is_read(record: EngineRecord, facts: PlanFacts) -> None:
    """``homelab serve`` put its gate in front: the record names the gate's URL and
    ceiling, and those are what an agent gets (a key in ``state_dir()/gate.key`` handed
    on); without the gate fields (``--no-gate``), the engine itself and no key."""
    assert record.gate_url is not None and record.gate_url != record.url
    assert record.gate_budget_tokens == facts.ctx_per_slot  # split slots: one slot's share
    budget = facts.ctx_per_slot // 2
    (state_dir() / KEY_NAME).write_text("k-0451\n")
    (state_dir() / KEY_NAME).chmod(0o600)
    target = engine_target(replace(record, gate_budget_tokens=budget))
    assert target.gated and target.base_url == record.gate_url and target.api_key == "k-0451"
    assert target.context_tokens == budget and "gate's ceiling" in target.context.source
    assert record.gate_max_tokens == DEFAULT_MAX_OUTPUT_TOKENS  # the gate's own cap, kept
    assert target.max_output_tokens == min(DEFAULT_MAX_OUTPUT_TOKENS, budget // 2)
    capped = engine_target(replace(record, gate_max_tokens=64))  # gate.toml's max_tokens_cap
    assert capped.max_output_tokens == 64 and capped.gate_max_tokens == 64
    bare = engine_target(replace(record, gate_url=None, gate_budget_tokens=None))
    assert not bare.gated and bare.api_key is None and bare.context_tokens == facts.ctx_per_slot
    assert bare.base_url == record.url
    with pytest.raises(EngineNotAnsweringError, match="did not answer /v1/models"):
        served_model(f"http://127.0.0.1:{free_port()}")


def test_no_engine_is_a_clear_error_with_a_hint() -> None:
    result = homelab("agent", "opencode", "--print")
    assert result.returncode == 6, result.stdout + result.stderr
    assert result.stdout == ""
    assert "No engine running" in result.stderr and "homelab serve MODEL" in result.stderr
    assert "--detach" in result.stderr and "Traceback" not in result.stderr


def test_an_agent_that_is_not_installed_is_a_clear_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    result = homelab("agent", "aider", "--", "--help", env={"PATH": str(empty)})
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Agent not installed" in result.stderr and "no `aider` command on PATH" in result.stderr
    assert "aider-install" in result.stderr and "homelab agent aider --print" in result.stderr
    assert "Traceback" not in result.stderr
