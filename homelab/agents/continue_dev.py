"""Continue: a ``config.yaml`` block (printed for the IDE; a private file for the ``cn`` CLI).

Keys (continuedev/continue ``docs/reference.mdx`` and the zod schema in
``packages/config-yaml/src/schemas/models.ts``): top-level ``name``, ``version``,
``schema: v1``; a model with ``name``, ``provider: openai`` (any OpenAI-compatible server),
``model``, ``apiBase`` (``…/v1``), ``apiKey``, ``roles`` and
``defaultCompletionOptions.{contextLength, maxTokens}`` (without ``contextLength`` Continue
assumes a small default). The same text is a whole config and a local model block, so a
person can save it as ``.continue/models/homelab.yaml`` without touching their
``config.yaml``. The Continue CLI takes it with ``cn --config FILE`` (docs/cli/configuration).
"""

from __future__ import annotations

from homelab.agents.setup import AgentSetup, PrivateFile, quoted
from homelab.agents.target import AgentTarget

NAME = "continue"
PROGRAM = "cn"
CONFIG_FILE = "agents/continue.yaml"
PLACEHOLDER_KEY = "homelab"
ROLES = ("chat", "edit", "apply")


def config_yaml(target: AgentTarget) -> str:
    """The config block for ``target``."""
    lines = [
        f"# homelab: {target.describe()}",
        'name: "homelab"',
        'version: "1.0.0"',
        "schema: v1",
        "models:",
        f"  - name: {quoted('homelab ' + target.model)}",
        "    provider: openai",
        f"    model: {quoted(target.model)}",
        f"    apiBase: {quoted(target.openai_base)}",
        f"    apiKey: {quoted(target.api_key or PLACEHOLDER_KEY)}",
        "    roles:",
        *(f"      - {role}" for role in ROLES),
        "    defaultCompletionOptions:",
        f"      contextLength: {target.context_tokens}",
        f"      maxTokens: {target.max_output_tokens}",
    ]
    return "\n".join(lines) + "\n"


def setup(target: AgentTarget) -> AgentSetup:
    """Continue's config block, and the ``cn`` command line that uses it."""
    text = config_yaml(target)
    return AgentSetup(
        agent=NAME,
        program=PROGRAM,
        target=target,
        args=("--config", "{state}/" + CONFIG_FILE),
        files=(PrivateFile(CONFIG_FILE, text),),
        config_block=text,
    )
