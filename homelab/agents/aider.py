"""Aider: its command line and a model-metadata file homelab writes in its own state folder.

Keys (aider.chat/docs/llms/openai-compat and /docs/config/adv-model-settings): the model
as ``--model openai/<name>`` (the ``openai/`` prefix routes it through the OpenAI-compatible
client), ``--openai-api-base`` (``…/v1``), ``OPENAI_API_KEY`` (a placeholder when the gate
checks no key), and ``--model-metadata-file FILE`` with ``{"openai/<name>":
{"max_input_tokens", "max_output_tokens", "max_tokens", "litellm_provider": "openai",
"mode": "chat", ...}}``. "Aider never enforces token limits, it only reports token limit
errors": the metadata drives its warnings and repo-map sizing, so the input limit is the
window less one full answer.
"""

from __future__ import annotations

import json

from homelab.agents.setup import AgentSetup, PrivateFile
from homelab.agents.target import AgentTarget

NAME = "aider"
PROGRAM = "aider"
METADATA_FILE = "agents/aider.model.metadata.json"
PLACEHOLDER_KEY = "homelab"


def model_name(target: AgentTarget) -> str:
    return f"openai/{target.model}"


def metadata(target: AgentTarget) -> dict[str, object]:
    """The model-metadata object for ``target``."""
    return {
        model_name(target): {
            "max_tokens": target.max_output_tokens,
            "max_input_tokens": target.input_tokens,
            "max_output_tokens": target.max_output_tokens,
            "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    }


def setup(target: AgentTarget) -> AgentSetup:
    """Aider's command line, key and metadata file for ``target``."""
    args = (
        "--model",
        model_name(target),
        "--openai-api-base",
        target.openai_base,
        "--model-metadata-file",
        "{state}/" + METADATA_FILE,
    )
    text = json.dumps(metadata(target), indent=2) + "\n"
    return AgentSetup(
        agent=NAME,
        program=PROGRAM,
        target=target,
        env={"OPENAI_API_KEY": target.api_key or PLACEHOLDER_KEY},
        args=args,
        files=(PrivateFile(METADATA_FILE, text),),
    )
