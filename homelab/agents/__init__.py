"""Coding agents pointed at homelab's engine, with the context one request really has.

``homelab agent claude|opencode|codex|aider|continue`` launches an agent (or prints what it
needs) so that it talks to the gate (or to the engine served with ``--no-gate``) and
compacts its conversation in time. Agents assume a large window for a model they do not
know (Claude Code 200,000 tokens, Codex 272,000, OpenCode none at all), so each is told
the context ONE request can use: the per-slot share for split slots, the gate's ceiling
for a unified pool, never the model's trained maximum nor the whole ``-c``.

- :mod:`homelab.agents.target`: :class:`~homelab.agents.target.AgentTarget` (URL, model,
  key, per-request context, output cap) and the rule that computes the context.
- :mod:`homelab.agents.engine_target`: the target of the engine homelab runs (its record
  and its ``/v1/models``).
- :mod:`homelab.agents.setup`: :class:`~homelab.agents.setup.AgentSetup`, what one agent
  gets (environment, arguments, files, a config block, warnings).
- one module per agent (``claude``, ``opencode``, ``codex``, ``aider``, ``continue_dev``)
  and :mod:`homelab.agents.catalog`, which names them.
- :mod:`homelab.agents.launch`: writes an agent's files into homelab's state folder and
  finds its program. The user's own agent configuration is never read nor written.
"""
