"""Coding agents pointed at homelab's engine, with the context one request really has.

``homelab agent claude|opencode|codex|aider|continue`` launches an agent (or prints what it
needs) so that it talks to the gate (or to the engine served with ``--no-gate``) and
compacts its conversation in time. Agents assume a large window for a model they do not
know (Claude Code 200,000 tokens, Codex 272,000, OpenCode none at all), so each is told
the context ONE request can use: the per-slot share for split slots, the gate's ceiling
for a unified pool, never the model's trained maximum nor the whole ``-c``.

The user's own agent configuration is never read nor written.
"""
