"""Codex CLI: ``-c key=value`` overrides on its command line (values are TOML).

Keys (openai/codex ``docs/config.md``: ``-c``/``--config`` takes dotted keys with TOML
values; ``codex-rs`` ``ConfigToml``): ``model_providers.homelab.{name,base_url,wire_api,
env_key}``, ``model_provider``, ``model``, ``model_context_window`` (the window Codex
counts against; for an unknown model it assumes 272,000) and
``model_auto_compact_token_limit`` ("token usage threshold triggering auto-compaction";
Codex's default is 90 % of the window). ``wire_api`` is ``"responses"``: current Codex
rejects ``"chat"`` (``CHAT_WIRE_API_REMOVED_ERROR`` in ``model-provider-info``), and
llama-server (b11312) serves ``/v1/responses``; the gate routes it like its chat routes
(admitted, ``max_output_tokens`` capped, streamed through). With a gate key, ``env_key``
names ``HOMELAB_API_KEY``, set for Codex only.

Compaction here: at 90 % of the window, and never later than window − max output, so a
compacted turn's prompt and its answer both fit under the ceiling.
"""

from __future__ import annotations

from homelab.agents.setup import AgentSetup, quoted
from homelab.agents.target import AgentTarget

NAME = "codex"
PROGRAM = "codex"
PROVIDER_ID = "homelab"
KEY_VARIABLE = "HOMELAB_API_KEY"


def auto_compact_limit(target: AgentTarget) -> int:
    """Tokens of history at which Codex compacts (see the module docstring)."""
    window = target.context_tokens
    return max(1, min(window * 9 // 10, window - target.max_output_tokens))


def overrides(target: AgentTarget) -> dict[str, str]:
    """``-c`` keys and their TOML values."""
    provider = f"model_providers.{PROVIDER_ID}"
    values = {
        f"{provider}.name": quoted("homelab"),
        f"{provider}.base_url": quoted(target.openai_base),
        f"{provider}.wire_api": quoted("responses"),
    }
    if target.api_key:
        values[f"{provider}.env_key"] = quoted(KEY_VARIABLE)
    values |= {
        "model_provider": quoted(PROVIDER_ID),
        "model": quoted(target.model),
        "model_context_window": str(target.context_tokens),
        "model_auto_compact_token_limit": str(auto_compact_limit(target)),
    }
    return values


def setup(target: AgentTarget) -> AgentSetup:
    """Codex's command line (and key variable) for ``target``."""
    args: list[str] = []
    for key, value in overrides(target).items():
        args += ["-c", f"{key}={value}"]
    env = {KEY_VARIABLE: target.api_key} if target.api_key else {}
    return AgentSetup(agent=NAME, program=PROGRAM, target=target, env=env, args=tuple(args))
