"""The application layer: the workflows both front-ends call, and nothing below calls.

:mod:`.prepare` plans a model on a card once (``homelab plan``, ``serve --dry-run``, the TUI's
preview and the session all use its ``Prepared``); :mod:`.judge` judges models, quants and
presets on a card; :mod:`.session` serves one (pull → start, adopt or replace → ready →
actuals → live → stopped), proved and healed (:mod:`.prove`, :mod:`.heal`) and re-planned in
place (:mod:`.replan`), told as the events of :mod:`.events`, which :mod:`.describe` words
once for the CLI and the TUI (:mod:`.bus` delivers them without blocking the producer).
"""
