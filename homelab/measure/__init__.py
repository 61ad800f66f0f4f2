"""Measuring what the card really serves: the recipe's fifth step (``homelab bench``).

The plan's slot count is a memory answer; this package measures the compute answer by
loading the running engine with traffic and watching the first token. UI-free:

- :mod:`~homelab.measure.shapes` the traffic: independent prompts (no shared prefix) and
  agent sessions (a shared system prompt, each turn the whole history plus a new part);
- :mod:`~homelab.measure.stream` one streamed request, timed at the client and by the
  engine's own ``timings``;
- :mod:`~homelab.measure.stats` percentiles; :mod:`~homelab.measure.levels` one
  concurrency level's figures; :mod:`~homelab.measure.runner` the levels one after
  another, bounded in time, cancellable, with :mod:`~homelab.measure.progress` events;
- :mod:`~homelab.measure.verdict` where compute runs out before memory, and the
  recommended ``max_concurrent`` / slots; :mod:`~homelab.measure.report` the whole
  result and its ``--json`` form;
- :mod:`~homelab.measure.target` which engine (and gate) to measure;
  :mod:`~homelab.measure.key` / :mod:`~homelab.measure.store` results kept per (model,
  engine version, flags, card); :mod:`~homelab.measure.summary` the line ``homelab plan``
  shows; :mod:`~homelab.measure.svg` and :mod:`~homelab.measure.text_chart` the pictures.
"""
