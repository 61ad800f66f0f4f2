"""Helpers of the real-agent tests: homelab as a child process, the served engine, one
agent run through ``homelab agent`` and the gate's log of what it sent."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from homelab.engine.supervision.facts import PlanFacts
from homelab.engine.supervision.state_file import StateFile
from homelab.gate.access_log import Entry, entry_of_line

REPO = Path(__file__).resolve().parents[2]
AGENT_TIMEOUT_S = 600
"""An upper bound for one agent run on a loaded 2-core machine, not an expectation."""
CLOSED = "http://127.0.0.1:9"
"""Every proxy variable points here (nothing listens): a call past the gate fails at once."""
OFFLINE = {
    **{name: CLOSED for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")},
    **{name.lower(): CLOSED for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")},
    "NO_PROXY": "127.0.0.1,localhost,::1",
    "no_proxy": "127.0.0.1,localhost,::1",
    "DO_NOT_TRACK": "1",
    "NO_COLOR": "1",
    "TERM": "dumb",
}
QUIET: dict[str, dict[str, str]] = {
    "claude": {
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    },
    "codex": {},
    "opencode": {
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
        "OPENCODE_DISABLE_SHARE": "1",
    },
    "aider": {
        "AIDER_ANALYTICS": "false",
        "AIDER_CHECK_UPDATE": "false",
        "AIDER_SHOW_RELEASE_NOTES": "false",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    },
    "continue": {"CONTINUE_TELEMETRY_ENABLED": "0", "CONTINUE_ALLOW_ANONYMOUS_TELEMETRY": "0"},
}
"""Each agent's own switches for telemetry, update checks and downloads (its docs' names)."""


def homelab(
    env: Mapping[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``python -m homelab ARGS`` from the repository in ``env``; never raises on its code."""
    return subprocess.run(
        [sys.executable, "-m", "homelab", *args],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
    )


@dataclass(frozen=True)
class AgentRun:
    """One agent run: what it printed, how long it took, what the gate logged meanwhile."""

    result: subprocess.CompletedProcess[str]
    seconds: float
    entries: list[Entry]

    @property
    def completions(self) -> list[Entry]:
        """The logged requests the gate charged (the completion routes)."""
        return [e for e in self.entries if e.charge is not None]

    def describe(self) -> str:
        lines = [f"exit {self.result.returncode} after {self.seconds:.1f} s"]
        lines += [
            f"  {e.method} {e.path} {e.status} {e.seconds:.1f} s {e.charge}" for e in self.entries
        ]
        lines += ["stdout:", self.result.stdout[-3000:], "stderr:", self.result.stderr[-3000:]]
        return "\n".join(lines)


@dataclass(frozen=True)
class Served:
    """The engine and gate one module serves, and the environment homelab runs in there."""

    env: dict[str, str]
    base: Path
    bin: Path
    url: str
    """The gate's URL."""
    facts: PlanFacts
    budget_tokens: int
    """The gate's per-request ceiling, as the engine record says."""

    @classmethod
    def read(cls, env: dict[str, str], base: Path, agents_bin: Path) -> Served:
        record = StateFile(base / "state" / "engine.json").read()
        assert record is not None and record.facts is not None, "no engine record"
        assert record.gate_url is not None and record.gate_budget_tokens is not None
        return cls(env, base, agents_bin, record.gate_url, record.facts, record.gate_budget_tokens)

    def gate_entries(self) -> list[Entry]:
        """Every request the gate has logged so far, in order."""
        found = []
        for log in sorted((self.base / "state" / "logs").glob("gate*.log")):
            for line in log.read_text(errors="replace").splitlines():
                entry = entry_of_line(line)
                if entry is not None:
                    found.append(entry)
        return found

    def agent_env(self, agent: str, home: Path) -> dict[str, str]:
        """The environment ``homelab agent`` (and so the agent) runs in: a fresh HOME."""
        for sub in (".config", ".local/share", ".cache", ".local/state"):
            (home / sub).mkdir(parents=True, exist_ok=True)
        return {
            **self.env,
            **OFFLINE,
            **QUIET[agent],
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local/share"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_STATE_HOME": str(home / ".local/state"),
            "PATH": f"{self.bin}:{self.env['PATH']}",
        }

    def run_agent(self, agent: str, home: Path, *args: str, cwd: Path | None = None) -> AgentRun:
        """``homelab agent AGENT -- ARGS`` in ``cwd`` (default: ``home``), timed; the gate's
        log lines it caused."""
        before = len(self.gate_entries())
        start = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "homelab", "agent", agent, "--", *args],
            env=self.agent_env(agent, home),
            cwd=cwd or home,
            capture_output=True,
            text=True,
            timeout=AGENT_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        seconds = time.monotonic() - start
        time.sleep(0.2)  # the gate writes a stream's line once it has ended
        return AgentRun(result, seconds, self.gate_entries()[before:])
