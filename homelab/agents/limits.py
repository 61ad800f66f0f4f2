"""Each agent's own rule for the window it is told, read from its pinned release's code.

An agent that is told a window below what it accepts replaces it with its own number and
then plans on more context than one request has at the gate. These are the rules of the
releases homelab's tests install (read in their shipped bundles, not their docs):

- **Claude Code 2.1.328** (``@anthropic-ai/claude-code-linux-x64``, the ``claude`` Bun
  bundle): ``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` is parsed by ``j0e`` and a value below
  ``eH=1e5`` is ``below_minimum``: ``vWn`` returns ``eH`` instead ("reads as 32,768
  tokens, so Claude Code treats it as the 100k minimum"). The window itself, for a model
  id it does not know, is ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` taken as given (``uT``: ``if
  (!cT(e)) return 200000; let y = CLAUDE_CODE_MAX_CONTEXT_TOKENS; if (y > 0) return y``,
  ``cT`` true when no catalog Claude model matches the id); without it Claude Code assumes
  1,000,000. The auto-compact window is clamped to that window (``Math.min(r, g)``), and
  it compacts at window − min(max output, 20,000) − 13,000 (``AWn=13000``). Measured with
  ``claude -p /context``: ``CLAUDE_CODE_MAX_CONTEXT_TOKENS=32768`` shows "12.4k / 32.8k",
  and its own prompt and tools take 12.4k tokens before any conversation.
- **Codex 0.169.0** (``codex-rs``, ``protocol/src/openai_models.rs``): ``model_context_window``
  is taken as given (no floor); auto-compaction at min(``model_auto_compact_token_limit``,
  90 % of the window); 95 % of the window is usable (``effective_context_window_percent``).
- **OpenCode 1.18.33** (``opencode-linux-x64`` bundle, ``SessionCompaction.isOverflow`` →
  ``vn``): ``limit.context`` is taken as given (0: never compacts); it overflows at
  context − min(``limit.output``, 32,000) (``OUTPUT_TOKEN_MAX=32000``).
- Aider and Continue enforce no window of their own (aider "never enforces token limits").

The answer bound each is told (``CLAUDE_CODE_MAX_OUTPUT_TOKENS``, ``limit.output``, aider's
``max_output_tokens``, Continue's ``maxTokens``; Codex sends none and the gate writes its
cap) is taken as given: Claude Code 2.1.328 (``yDn``) only caps a value above its upper
limit (128,000 for a model it does not know, ``Vas``); what differs is what each does with
an answer that stops at the bound (``output_rule``). Claude Code resumes it three times and
then ends a print run "Claude's response exceeded the N output token maximum" (``oio``,
exit 1), so a gate cap below the plan's room for an answer is said, with its fix
(:mod:`homelab.agents.output_cap`).

So Claude Code is the one agent with a floor: below it homelab does not export the
compaction window (it would be raised to 100k), exports the real window as
``CLAUDE_CODE_MAX_CONTEXT_TOKENS``, and says in one line that the engine gives less
than Claude Code works with (:mod:`homelab.agents.shortfall`).
"""

from __future__ import annotations

from dataclasses import dataclass

from homelab.plan.workload import AGENT_TOKENS, Workload


@dataclass(frozen=True, slots=True)
class AgentLimit:
    """What one agent accepts as the context of one request."""

    agent: str
    minimum_tokens: int | None
    """The smallest window the agent works with as told; None: it takes any window."""
    rule: str
    """The agent's own rule, for a person (``homelab agent NAME --json``)."""
    output_rule: str = "the answer bound taken as given"
    """What the agent does with the answer bound it is told, and with an answer cut there."""

    def accepts(self, tokens: int) -> bool:
        return self.minimum_tokens is None or tokens >= self.minimum_tokens

    def workload(self, title: str) -> Workload:
        """What ``--for AGENT`` plans each slot for: the agent's minimum, else homelab's
        agent workload (~100k tokens per conversation)."""
        tokens = self.minimum_tokens if self.minimum_tokens is not None else AGENT_TOKENS
        return Workload(title, tokens)


CLAUDE_MINIMUM_TOKENS = 100_000
"""Claude Code 2.1.328's ``eH``: the smallest auto-compact window it accepts."""

LIMITS: dict[str, AgentLimit] = {
    limit.agent: limit
    for limit in (
        AgentLimit(
            "claude",
            CLAUDE_MINIMUM_TOKENS,
            "CLAUDE_CODE_AUTO_COMPACT_WINDOW below 100,000 is read as 100,000 (Claude Code "
            "2.1.328); CLAUDE_CODE_MAX_CONTEXT_TOKENS is taken as given",
            "CLAUDE_CODE_MAX_OUTPUT_TOKENS taken as given up to 128,000; an answer cut there "
            "is resumed 3 times, then the run ends with exit 1",
        ),
        AgentLimit(
            "codex",
            None,
            "model_context_window taken as given; compacts at min(model_auto_compact_token_limit"
            ", 90% of it) (Codex 0.169.0)",
            "sends no answer bound: the gate's cap is the one it gets",
        ),
        AgentLimit(
            "opencode",
            None,
            "limit.context taken as given; compacts at context − min(limit.output, 32,000) "
            "(OpenCode 1.18.33)",
            "limit.output sent as max_tokens, as given",
        ),
        AgentLimit(
            "aider",
            None,
            "no limit enforced; the metadata sizes its repo map",
            "sends no answer bound; an answer cut short prints 'has hit a token limit!'",
        ),
        AgentLimit("continue", None, "contextLength taken as given", "maxTokens sent as given"),
    )
}


def agent_limit(agent: str) -> AgentLimit:
    """Agent ``agent``'s rule (one taking any window when homelab knows none)."""
    return LIMITS.get(agent) or AgentLimit(agent, None, "no limit known")
