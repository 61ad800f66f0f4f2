"""The application layer: a serve session, plan → pull → start (or adopt / replace) → ready → actuals → live → stopped,
told as events (:mod:`.events`) that the CLI renders as text and the TUI as widgets
(:mod:`.session` runs it; :mod:`.bus` delivers the events without blocking the producer)."""
