"""The homelab TUI (Textual): see the card, pick a model, know why it fits, run it.

``homelab`` alone (or ``homelab ui``) opens it; :func:`homelab.ui.app.make_app` builds
the app for the command line and for the tests. The app renders and dispatches only:
every call into the domain (through :mod:`homelab.ui.backend` where the TUI adds a rule)
runs in a worker thread and comes back as one of the past-tense messages in
:mod:`homelab.ui.messages` (or of the flow that posts it).
"""
