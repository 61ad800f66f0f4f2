"""Continue: a ``config.yaml`` block (printed for the IDE; a private file for the ``cn`` CLI).

Keys (continuedev/continue ``docs/reference.mdx`` and the zod schema in
``packages/config-yaml/src/schemas/models.ts``): top-level ``name``, ``version``,
``schema: v1``; a model with ``name``, ``provider: openai`` (any OpenAI-compatible server),
``model``, ``apiBase`` (``…/v1``), ``apiKey``, ``roles`` and
``defaultCompletionOptions.{contextLength, maxTokens}`` (without ``contextLength`` Continue
assumes a small default). The same text is a whole config and a local model block, so a
person can save it as ``.continue/models/homelab.yaml`` without touching their
``config.yaml``. The Continue CLI takes it with ``cn --config FILE`` (docs/cli/configuration).

``maxTokens`` is at most a quarter of the window: Continue keeps room for the answer and
as much again for compaction (cn 1.5.47's context check, seen in its bundle: input room =
``contextLength − maxTokens − min(max(maxTokens, 0.2 × (contextLength − maxTokens)),
15,000)``) and refuses to run at all ("max_tokens is larger than context_length") when that
is not positive — which half the window, homelab's usual output bound, makes exactly 0.

Behind a set of models (``homelab serve A B C``) the chat model is the set's agent model and
a second block gives the set's FIM model the ``autocomplete`` role.
"""

from __future__ import annotations

from homelab.agents.setup import AgentSetup, PrivateFile, quoted
from homelab.agents.target import AgentTarget

NAME = "continue"
PROGRAM = "cn"
CONFIG_FILE = "agents/continue.yaml"
PLACEHOLDER_KEY = "homelab"
ROLES = ("chat", "edit", "apply")


def max_tokens(target: AgentTarget) -> int:
    """The answer bound Continue is told: the target's, at most a quarter of the window
    (see the module docstring), so half the window stays for the conversation."""
    return max(1, min(target.max_output_tokens, target.context_tokens // 4))


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
        f"      maxTokens: {max_tokens(target)}",
        *_autocomplete(target),
    ]
    return "\n".join(lines) + "\n"


def _autocomplete(target: AgentTarget) -> list[str]:
    """A set's FIM model, for the ``autocomplete`` role (nothing without one)."""
    fim = target.fim_model
    if fim is None:
        return []
    lines = [
        f"  - name: {quoted('homelab ' + fim + ' (autocomplete)')}",
        "    provider: openai",
        f"    model: {quoted(fim)}",
        f"    apiBase: {quoted(target.openai_base)}",
        f"    apiKey: {quoted(target.api_key or PLACEHOLDER_KEY)}",
        "    roles:",
        "      - autocomplete",
    ]
    if target.fim_context_tokens is not None:
        lines += [
            "    defaultCompletionOptions:",
            f"      contextLength: {target.fim_context_tokens}",
        ]
    return lines


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
