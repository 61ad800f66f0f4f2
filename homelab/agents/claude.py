"""Claude Code: environment variables only (llama-server serves Anthropic's ``/v1/messages``).

Keys (Claude Code's env-vars reference, code.claude.com/docs/en/env-vars):
``ANTHROPIC_BASE_URL`` (the gate, no ``/v1``), ``ANTHROPIC_AUTH_TOKEN`` (sent as
``Authorization: Bearer``; a placeholder when the gate checks no key),
``ANTHROPIC_MODEL`` and ``ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL`` (so background
and sub-agent calls go to the same model; behind a set of models the haiku tier, and
``ANTHROPIC_SMALL_FAST_MODEL`` which 2.1.328 reads first for that tier, name the set's small
model: :mod:`homelab.agents.set_target`), ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` (the window
of a model id it does not know, taken as given; without it 2.1.328 assumes 1,000,000),
``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` only from 100,000 tokens (below that Claude Code reads
it as 100,000: :mod:`homelab.agents.limits`; unset, the window is the compaction window)
and ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``. ``ANTHROPIC_API_KEY`` is removed: it would be sent
too, and override the token.

Compaction point (2.1.328's ``AWn=13000`` and its ``/context`` "Autocompact buffer",
21.2k with an 8,192-token output cap): ``window − min(max_output, 20,000) − 13,000``. Its
own system prompt, tools and skills take ~12,400 tokens before any conversation by its own
estimate (``/context`` with no server; through a server it asks ``count_tokens``, so the
figure follows the model's template), so a window whose compaction point is below that
compacts at once. Measured through ``homelab agent claude -- -p /context`` on SmolLM2 at
2 × 1,024: "3.6k / 1k" — it plans on the per-slot share, not 100k nor 1M.
"""

from __future__ import annotations

from homelab.agents.limits import CLAUDE_MINIMUM_TOKENS
from homelab.agents.setup import AgentSetup
from homelab.agents.target import AgentTarget

NAME = "claude"
PROGRAM = "claude"
PLACEHOLDER_TOKEN = "homelab"
"""Sent when the gate checks no key (Claude Code wants some credential to start)."""
AUTOCOMPACT_BUFFER_TOKENS = 13_000
OUTPUT_RESERVE_LIMIT = 20_000
MAX_OUTPUT_TOKENS = 128_000
"""2.1.328's upper limit on ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` for a model it does not know
(``Vas``; above it, "Capped from N to 128000")."""
OWN_PROMPT_TOKENS = 12_400
"""Claude Code 2.1.328's system prompt, tools and skills (``claude -p /context``: 12.4k)."""


def compaction_point(window: int, max_output: int) -> int:
    """Conversation tokens at which Claude Code compacts: window − min(out, 20k) − 13k."""
    return window - min(max_output, OUTPUT_RESERVE_LIMIT) - AUTOCOMPACT_BUFFER_TOKENS


def warnings(target: AgentTarget) -> tuple[str, ...]:
    """Why the window is too small for Claude Code (one line), or nothing from 100,000."""
    window, out = target.context_tokens, target.max_output_tokens
    if window >= CLAUDE_MINIMUM_TOKENS:
        return ()
    point = compaction_point(window, out)
    remedy = target.context.remedy
    if point <= OWN_PROMPT_TOKENS:
        return (
            f"Claude Code cannot work in {window:,} tokens per request: it compacts at "
            f"{point:,} (window − output {min(out, OUTPUT_RESERVE_LIMIT):,} − 13,000), under "
            f"its own ~{OWN_PROMPT_TOKENS:,}-token prompt; it needs {CLAUDE_MINIMUM_TOKENS:,} "
            f"({remedy}).",
        )
    return (
        f"Claude Code needs {CLAUDE_MINIMUM_TOKENS:,} tokens per request and gets {window:,} "
        f"(it compacts at {point:,}); below {CLAUDE_MINIMUM_TOKENS:,} it reads its compaction "
        f"window as {CLAUDE_MINIMUM_TOKENS:,}, so it is told only its real window ({remedy}).",
    )


def setup(target: AgentTarget) -> AgentSetup:
    """Claude Code's environment for ``target``."""
    model = target.model
    env = {
        "ANTHROPIC_BASE_URL": target.base_url,
        "ANTHROPIC_AUTH_TOKEN": target.api_key or PLACEHOLDER_TOKEN,
        "ANTHROPIC_MODEL": model,
        "ANTHROPIC_DEFAULT_OPUS_MODEL": model,
        "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
        "ANTHROPIC_DEFAULT_HAIKU_MODEL": target.small_model or model,
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": str(target.context_tokens),
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(min(target.max_output_tokens, MAX_OUTPUT_TOKENS)),
    }
    if target.small_model is not None:  # 2.1.328 asks it before the haiku tier's model
        env["ANTHROPIC_SMALL_FAST_MODEL"] = target.small_model
    if target.context_tokens >= CLAUDE_MINIMUM_TOKENS:  # below it Claude Code overrides it
        env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(target.context_tokens)
    return AgentSetup(
        agent=NAME,
        program=PROGRAM,
        target=target,
        env=env,
        unset=("ANTHROPIC_API_KEY",)
        + (
            () if "CLAUDE_CODE_AUTO_COMPACT_WINDOW" in env else ("CLAUDE_CODE_AUTO_COMPACT_WINDOW",)
        ),
        warnings=warnings(target),
    )
