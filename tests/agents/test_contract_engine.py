"""The agent contract check against the real llama-server serving the real SmolLM2-135M.

What SmolLM2's own template does, found by running it (b11312, chat format "peg-native"):
its template has no tools section, so the tools are not even rendered into the prompt (41
prompt tokens with or without them) and even with the call required every route answers
plain text — chat ``message.content``, an Anthropic ``text`` block, a Responses
``output_text`` — never a structured call. So the verdict for every agent is that the
template emits no tool calls, while each route itself answers (HTTP 200) and Claude Code's
``count_tokens`` counts. A server started with ``--no-jinja`` refuses tools outright.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from homelab.agents.contract import NO_TOOL_CALLS, check, probe_routes
from homelab.agents.engine_target import engine_target
from homelab.agents.target import AgentTarget, RequestContext
from homelab.engine.llamacpp.locate import find_llama_server
from tests.agents.test_agent_cli import homelab, serve_detached
from tests.engine.supervisor_child import REPO, script_env
from tests.factory.server_log import free_port

pytestmark = pytest.mark.engine
SLOW = "600"
"""Seconds a probe may take here: the suite's CPU runner on a loaded 2-core machine
measured ~1 token/s under load (48 tokens in 66-122 s)."""


def test_smollm2s_template_emits_no_tool_calls_on_any_route(smollm2_gguf: Path, engines) -> None:
    served, record = serve_detached(smollm2_gguf, engines)
    try:
        assert served.returncode == 0, served.stderr
        assert record is not None and record.gate_url is not None
        # two agents at once (the plan has two slots): Claude Code's routes and Codex's
        claude = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "homelab",
                "agent",
                "claude",
                "--check",
                "--probe-timeout",
                SLOW,
            ],
            cwd=REPO,
            env=script_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        codex = homelab("agent", "codex", "--json", "--probe-timeout", SLOW)
        claude_out, claude_err = claude.communicate(timeout=1500)

        assert codex.returncode == 8, codex.stdout + codex.stderr  # the contract failed
        report = json.loads(codex.stdout)
        assert report["accepts"] is True and report["shortfall"] is None  # any window
        contract = report["contract"]
        assert contract["ok"] is False and contract["line"] == NO_TOOL_CALLS
        [responses] = contract["probes"]
        assert responses["route"] == "/v1/responses" and responses["status"] == 200
        assert responses["tool_call"] is False
        assert report["url"] == record.gate_url  # probed through the gate

        assert claude.returncode == 3, claude_out + claude_err  # the window comes first
        lines = claude_out.splitlines()
        assert lines[0].startswith(f"Claude Code → {record.gate_url} (gate)")
        assert any(line.startswith("warning: Claude Code cannot work in 1,024") for line in lines)
        offer = next(line for line in lines if line.startswith("offer: "))
        assert "at most 8,192 tokens" in offer  # SmolLM2's trained context, planned for it
        assert f"agent contract: {NO_TOOL_CALLS}" in lines

        target = engine_target(record)
        counted = probe_routes(target, ("/v1/messages/count_tokens",), float(SLOW))
        assert counted[0].ok and counted[0].status == 200  # Claude Code's counting works

        chat = homelab("agent", "opencode", "--json", "--no-probe")
        assert chat.returncode == 0 and json.loads(chat.stdout)["contract"] is None
    finally:
        stopped = homelab("stop")
        assert stopped.returncode == 0, stopped.stderr


def test_a_server_without_jinja_refuses_tools(smollm2_gguf: Path) -> None:
    port = free_port()
    argv = [
        find_llama_server(),
        "-m",
        str(smollm2_gguf),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        "1024",
        "-np",
        "1",
        "--no-jinja",
    ]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/health", timeout=5, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        target = AgentTarget(url, "smol", RequestContext(1024, "test"), 256, gated=False)
        judged = check("aider", target, timeout_s=float(SLOW))
        assert not judged.ok
        assert (
            judged.line == "/v1/chat/completions: the server runs without --jinja: it refuses tools"
        )
        assert judged.probes[0].status is not None and judged.probes[0].status >= 400
    finally:
        server.terminate()
        server.wait(timeout=30)
