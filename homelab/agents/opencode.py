"""OpenCode: one JSON config in ``OPENCODE_CONFIG_CONTENT``, merged over the user's own.

Keys (opencode.ai/docs/providers, the "llama.cpp" example, and opencode.ai/docs/config for
``OPENCODE_CONFIG_CONTENT``, which OpenCode merges last, over the user's config files):
a provider ``homelab`` with ``npm: "@ai-sdk/openai-compatible"``,
``options.baseURL`` (the gate's ``…/v1``), ``options.apiKey`` when the gate has a key, and
the model with ``limit: {context, output}``; ``model`` and ``small_model`` name it, or
titles and summaries go to a hosted default. Without ``limit`` a custom model's context
is 0 and OpenCode never compacts (quickbeard/codev-hub PR #171).
"""

from __future__ import annotations

import json

from homelab.agents.setup import AgentSetup
from homelab.agents.target import AgentTarget

NAME = "opencode"
PROGRAM = "opencode"
PROVIDER_ID = "homelab"
CONFIG_VARIABLE = "OPENCODE_CONFIG_CONTENT"


def config(target: AgentTarget) -> dict[str, object]:
    """The OpenCode config object for ``target``."""
    options: dict[str, object] = {"baseURL": target.openai_base}
    if target.api_key:
        options["apiKey"] = target.api_key
    model = target.model
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": f"{PROVIDER_ID}/{model}",
        "small_model": f"{PROVIDER_ID}/{model}",
        "provider": {
            PROVIDER_ID: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "homelab",
                "options": options,
                "models": {
                    model: {
                        "name": model,
                        "limit": {
                            "context": target.context_tokens,
                            "output": target.max_output_tokens,
                        },
                    }
                },
            }
        },
    }


def setup(target: AgentTarget) -> AgentSetup:
    """OpenCode's environment for ``target``."""
    text = json.dumps(config(target), separators=(",", ":"))
    return AgentSetup(agent=NAME, program=PROGRAM, target=target, env={CONFIG_VARIABLE: text})
