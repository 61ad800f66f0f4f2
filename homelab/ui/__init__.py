"""The homelab TUI (Textual): see the card, pick a model, know why it fits, run it.

``homelab`` alone (or ``homelab ui``) opens it; :func:`homelab.ui.app.make_app` builds
the app for the command line and for the tests. The app renders and dispatches only:
every call into the domain goes through :mod:`homelab.ui.backend` (and, for a first
run, :mod:`homelab.ui.backend_first_run`), from a worker thread, and comes back as one of
the past-tense messages in :mod:`homelab.ui.messages` (or of the flow that posts it).

Modules: ``app`` (the App, its keys and workers), ``backend`` (the domain calls),
``messages``, ``catalog`` (model rows and their verdict text), ``screens`` (the
confirm, quit and llama-server path dialogs), ``settings`` (the TUI settings file),
``*_flow`` (the App's mixins: models, engine, download, live, engine setup, offline),
``widgets/`` (card, models menu, plan, server, engine-setup panels, the offline line),
``homelab.tcss`` (the one stylesheet).
"""
